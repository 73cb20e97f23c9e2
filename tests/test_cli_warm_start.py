"""`basketgnn train --warm-start PREV/best.pt --sample-customers N`: the nightly flags."""

from __future__ import annotations

import json

import torch

from tests.support.cli import run

TINY = "embed_dim: 8\nbatch_size: 64\nthreads: 1\nfusion: off\n"


def test_train_warm_started_on_a_sample_then_wrong_model_is_exit_2(monkeypatch, capsys, tmp_path, log_csv):
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"))[0] == 0
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    common = ["--data", str(tmp_path / "data"), "--config", str(config), "--epochs", "1", "--no-progress"]
    code, _, err = run(monkeypatch, capsys, "train", *common, "--out", str(tmp_path / "day1"))
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "train", *common, "--out", str(tmp_path / "day2"),
                         "--warm-start", str(tmp_path / "day1" / "best.pt"), "--sample-customers", "60")
    assert code == 0, err
    assert "training on a sample of 60 of 150 customers (seed 0)" in out
    assert f"warm start from {(tmp_path / 'day1' / 'best.pt').resolve()}" in out
    assert "items kept, 0 new, 0 dropped" in out
    extras = torch.load(tmp_path / "day2" / "best.pt", weights_only=False)["extras"]
    assert extras["warm_start"]["items_new"] == 0
    # The saved split holds the sample's training customers only, and every test customer.
    split = json.loads((tmp_path / "day2" / "split.json").read_text())
    assert len(set(split["parts"]["train"]) | set(split["parts"]["validate"])) <= 60
    assert len(split["parts"]["test"]) == len(json.loads((tmp_path / "day1" / "split.json").read_text())["parts"]["test"])

    code, out, err = run(monkeypatch, capsys, "train", "--model", "din", *common[:2], "--epochs", "1",
                         "--no-progress", "--out", str(tmp_path / "din"),
                         "--warm-start", str(tmp_path / "day1" / "best.pt"))
    assert code == 2 and "a dnntsp checkpoint, but this run trains din" in err
    assert not (tmp_path / "din" / "best.pt").exists()
