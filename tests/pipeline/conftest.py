"""The runs that several pipeline test modules read, each made once per test session (the
helpers that make them are in tests/support/pipeline.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.pipeline import nightly_runs, run, torch_threads_kept, write_job, write_log_file


@pytest.fixture(scope="module", autouse=True)
def _restore_torch_threads():
    """The jobs train with threads: 1, which torch keeps process-wide."""
    with torch_threads_kept():
        yield


@pytest.fixture(scope="session")
def log(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """The test log (150 customers, 50 items) and its rows."""
    return write_log_file(tmp_path_factory.mktemp("log") / "log.csv")


@pytest.fixture(scope="session")
def first(log, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """Run A: the test job, uninterrupted."""
    config = write_job(tmp_path_factory.mktemp("a"), log[0])
    with torch_threads_kept():
        return config, run(config)


@pytest.fixture(scope="session")
def nights(tmp_path_factory) -> dict[str, Any]:
    """Night 1 (from scratch: nothing before), its rerun, night 2 (warm), its rerun."""
    with torch_threads_kept():
        return nightly_runs(tmp_path_factory.mktemp("nightly"))
