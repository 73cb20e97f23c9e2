"""Running the ``basketgnn`` command line in-process, as a user would, and a small transaction
log to run it on. The ``log_csv`` fixture (tests/conftest.py) writes that log once per module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from basketgnn.cli import main


def run_status(*args: str) -> int:
    """Exit status of ``basketgnn ARGS`` (0 on success, 2 on a user error); output stays in
    pytest's capture for the caller to read."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["basketgnn", *args])
        with pytest.raises(SystemExit) as exc:
            main()
    return int(exc.value.code or 0)


def run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``basketgnn ARGS``: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["basketgnn", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def run_ok(*args: str) -> None:
    """``basketgnn ARGS``, asserting it succeeds (usable in module-scoped fixtures)."""
    assert run_status(*args) == 0, args


def small_log(path: Path) -> Path:
    """A synthetic log of 150 customers over 40 items, written to ``path`` (CSV or Parquet)."""
    from basketgnn.data.synth import generate_log, write_log

    write_log(generate_log(n_customers=150, n_items=40, mean_baskets=6, seed=3), path)
    return path
