"""The run history of a run folder: ``RUN_DIR/pipeline.log``, where every run appends its
messages (:func:`run_log`), and ``RUN_DIR/runs.jsonl``, one line per successful run.

A runs.jsonl line holds when the run finished, the output key of its ``prepare`` stage (the data), each
trained model's checkpoint, the stage folders the run used and the checkpoints its fits started
from. ``train.warm_start: previous`` looks there for a model's checkpoint of the last successful
run on other data (:func:`previous_checkpoint`): skipping runs on the same data makes a rerun of
an unchanged job start from the same checkpoint, so it reuses every stage. With ``keep_runs: N``,
:func:`prune_stages` deletes the finished stage folders that none of the last N successful runs
used nor warm-started from.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from basketgnn.io_utils import write_text
from basketgnn.pipeline.cache import DONE_FILE, STAGES_DIR, Stage

LOG_FILE = "pipeline.log"
RUNS_FILE = "runs.jsonl"


@contextlib.contextmanager
def run_log(path: Path) -> Iterator[logging.Logger]:
    """The pipeline's logger, appending to ``path`` while the run lasts."""
    logger = logging.getLogger("basketgnn.pipeline")
    logger.setLevel(logging.INFO)
    # Stage lines already go to the console; keep them out of any root handler.
    logger.propagate = False
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


def successful_runs(run_dir: Path) -> list[dict[str, Any]]:
    """The records of RUNS_FILE, oldest first."""
    path = run_dir / RUNS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: not a finished run
    return records


def previous_checkpoint(run_dir: Path, name: str, data_key: str) -> Path | None:
    """``name``'s checkpoint of the last successful run in ``run_dir`` on data other than
    ``data_key`` whose file still exists, None when there is none."""
    for record in reversed(successful_runs(run_dir)):
        checkpoint = record.get("checkpoints", {}).get(name)
        if record.get("data") == data_key or checkpoint is None:
            continue
        if Path(checkpoint).is_file():
            return Path(checkpoint)
    return None


def record_run(
    run_dir: Path, prepare: Stage, fits: dict[str, Stage], stage_dirs: list[str]
) -> None:
    """Append this finished run's line to RUNS_FILE (rewritten atomically; a last line a crash
    cut short gets its line end first). ``stage_dirs``: the folders of the stages it used."""
    path = run_dir / RUNS_FILE
    record = {
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "data": prepare.output_key,
        "checkpoints": {name: str(fit.dir / "best.pt") for name, fit in fits.items()},
        "stages": [Path(d).name for d in stage_dirs],
        "warm_start": {name: fit.info["warm_start"]["checkpoint"]
                       for name, fit in fits.items() if "warm_start" in fit.info},
    }  # fmt: skip
    before = path.read_text() if path.is_file() else ""
    if before and not before.endswith("\n"):
        before += "\n"
    write_text(path, before + json.dumps(record) + "\n")


def prune_stages(run_dir: Path, keep_runs: int) -> list[str]:
    """Delete the finished stage folders (with ``_done.json``) that none of the last
    ``keep_runs`` successful runs used nor warm-started from; returns their names. Unfinished
    folders (a training to resume) stay. Nothing is deleted while a kept run's record has no
    ``stages`` list (what that run used is unknown)."""
    kept = successful_runs(run_dir)[-keep_runs:]
    if not kept or any("stages" not in r for r in kept):
        return []
    keep = {name for r in kept for name in r["stages"]}
    keep |= {Path(c).parent.name for r in kept for c in r.get("warm_start", {}).values()}
    removed = []
    for folder in sorted((run_dir / STAGES_DIR).iterdir()):
        if folder.name not in keep and (folder / DONE_FILE).is_file():
            shutil.rmtree(folder)
            removed.append(folder.name)
    return removed
