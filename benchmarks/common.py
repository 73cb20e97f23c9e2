"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
SHARED = PROJECT.parent / "shared" / "datasets" / "dnntsp"
RESULTS = PROJECT / "benchmarks" / "results"


def shared_dataset(name: str) -> Path:
    path = SHARED / f"{name}.json"
    if not path.is_file():
        sys.exit(f"skipped: {path} not found (the published splits live in ../shared/datasets)")
    return path


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def append_result(name: str, record: dict) -> None:
    """Append one JSON line to benchmarks/results/NAME.jsonl (one row per run, never scraped)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}
    with open(RESULTS / f"{name}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
