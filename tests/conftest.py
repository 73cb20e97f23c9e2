"""Shared fixtures. The published datasets live outside the project, in ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = PROJECT.parent / "shared" / "datasets" / "dnntsp"


def shared_dataset(name: str) -> Path:
    """Path of a published split, or skip the test with the reason."""
    path = SHARED_DATASETS / name
    if not path.is_file():
        pytest.skip(f"{path} not found: the published DNNTSP splits are only in ../shared")
    return path


@pytest.fixture
def dnntsp():
    """``dnntsp("TaFeng.json")`` -> path of a published split, skipping when ../shared is absent."""
    return shared_dataset


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: torch's intra-op threads only add overhead (several times the run time on a
    busy machine). One thread inside the test, restored afterwards. A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def log_csv(tmp_path_factory):
    """A small synthetic transaction log (CSV) for the command-line tests, one per module."""
    from tests.support.cli import small_log

    return small_log(tmp_path_factory.mktemp("log") / "log.csv")
