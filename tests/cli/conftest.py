"""Fixtures of the command-line tests (one module per module of basketgnn/cli/): the small log,
and the runs and checkpoints several modules read, each made once per session (every test only
reads them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import make_checkpoint, run_ok, run_status, small_log, train_zoo


@pytest.fixture(scope="session")
def log_csv(tmp_path_factory) -> Path:
    """The small synthetic log (tests/support/cli.py), written once for all command tests."""
    return small_log(tmp_path_factory.mktemp("log") / "log.csv")


@pytest.fixture(scope="session")
def trained(tmp_path_factory, log_csv) -> Path:
    """A tiny `basketgnn train` run folder: DNNTSP, two epochs, with the fusion with TIFU-KNN
    (the default), chosen and stored in the checkpoint."""
    folder = tmp_path_factory.mktemp("run")
    config = folder / "small.yaml"
    config.write_text("embed_dim: 8\nbatch_size: 32\nfusion: tifu\n")
    run_ok("prepare", str(log_csv), "--out", str(folder / "data"))
    run_ok("train", "--data", str(folder / "data"), "--config", str(config),
           "--out", str(folder / "out"), "--epochs", "2", "--no-progress")  # fmt: skip
    return folder / "out"


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """(best.pt, its data): an untrained DNNTSP fused with TIFU-KNN, no training needed."""
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def zoo_folder(tmp_path_factory, log_csv) -> Path:
    """A folder holding the small log prepared (``data``); zoo runs are trained into it."""
    folder = tmp_path_factory.mktemp("zoo")
    assert run_status("prepare", str(log_csv), "--out", str(folder / "data")) == 0
    return folder


@pytest.fixture(scope="session")
def _zoo_outputs() -> dict[str, str]:
    return {}


@pytest.fixture
def zoo_trained(zoo_folder, _zoo_outputs, monkeypatch, capsys):
    """``zoo_trained(model, fusion="off") -> (run folder, stdout of its train command)``: one
    epoch of a sequential model through `basketgnn train`, trained on first use in the session."""

    def get(model: str, fusion: str = "off") -> tuple[Path, str]:
        name = f"{model}-{fusion}"
        if name not in _zoo_outputs:
            _zoo_outputs[name] = train_zoo(monkeypatch, capsys, zoo_folder, model, fusion)
        return zoo_folder / name, _zoo_outputs[name]

    return get
