"""``results.jsonl``: one JSON line per finished run of an ablation grid, read back to resume the
grid and to make its table and chart.

A line is the workflow's one result record, :class:`basketgnn.workflow.ModelResult`, plus the
grid's own keys (:func:`result_record`)::

    model, params, data, split, part, n_users, metrics, timing_s {fit, score},  ModelResult.to_json()
    best_epoch, epochs_run, fusion
    dataset, data_path, data_hash, variant, kind, seed, config, config_hash,   the grid's keys
    finished_at

``kind`` is the trained model's registry name, or "baseline"; ``seed``, ``best_epoch``,
``epochs_run`` and ``fusion`` are null for baselines (``fusion`` also when it is off).
``config`` is what the grid asked for (a trained model's full effective config, a baseline's
constructor options), ``params`` what the fitted model reports (for TIFU-KNN: what validation
tuning chose). ``metrics`` holds every metric of the test part, null where undefined.

Appending is durable (one ``fsync`` per line) and a crash mid-write costs at most the run it was
writing: :func:`read_results` ignores a partial last line and :func:`repair_tail` cuts it off
before the next append.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from basketgnn.errors import UserError
from basketgnn.experiments.ablation_spec import Grid, Run, RunKey
from basketgnn.workflow import ModelResult

#: The keys a line must have to count as a result record (the run key's and the metrics).
REQUIRED_KEYS = ("dataset", "variant", "seed", "config_hash", "metrics")


def result_record(grid: Grid, run: Run, result: ModelResult) -> dict[str, Any]:
    """The results line of ``run``: its evaluation's record and the grid's keys."""
    return {
        **result.to_json(),
        "dataset": run.dataset,
        "data_path": grid.spec.datasets[run.dataset],
        "data_hash": run.data_hash,
        "variant": run.variant,
        "kind": run.kind,
        "seed": run.seed,
        "config": run.config,
        "config_hash": run.config_hash,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every record in a results file, in file order; [] if it does not exist.

    A last line without its newline is the trace of a crash mid-write and is ignored (that run
    is redone). Any other line that is not a JSON record is a :class:`UserError` naming it.
    """
    path = Path(path)
    if not path.exists():
        return []
    *lines, tail = path.read_text().split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            raise UserError(
                f"{path}: line {number} is not a result record; fix or delete that line."
            )
        records.append(record)
    if tail.strip():
        complete = _parse(tail)  # a whole record whose newline alone is missing still counts
        if complete is not None:
            records.append(complete)
    return records


def _parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(record, dict) and all(k in record for k in REQUIRED_KEYS):
        return record
    return None


def record_key(record: dict[str, Any]) -> RunKey:
    """The key of a results line; a line without ``data_hash`` has None there, so it matches no
    planned run (whose data_hash is always set) and that run is redone."""
    return (
        record["dataset"],
        record["variant"],
        record["seed"],
        record["config_hash"],
        record.get("data_hash"),
    )


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as one line, durably: a crash leaves the earlier lines intact."""
    line = json.dumps(record, allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def repair_tail(path: Path) -> None:
    """Make the file end at a line boundary before appending to it.

    A partial last line (crash mid-write) is cut off; otherwise the next record would be glued
    to it and both lost. A complete record that only lacks its newline gets one.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    if _parse(data[cut:].decode("utf-8", errors="replace")) is not None:
        with open(path, "ab") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
    else:
        with open(path, "r+b") as f:
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())


def current_results(
    grid: Grid, records: Iterable[dict[str, Any]], only_datasets: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """The records of the grid's planned runs, in grid order (the latest when repeated).

    Lines of runs no longer in the spec (e.g. a variant whose overrides changed) are left out,
    so a table never mixes two settings under one name.
    """
    latest = {record_key(r): r for r in records}
    wanted = None if only_datasets is None else set(only_datasets)
    return [
        latest[run.key]
        for run in grid.runs
        if run.key in latest and (wanted is None or run.dataset in wanted)
    ]
