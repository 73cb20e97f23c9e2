"""Where `prepare` spends its time and temporary disk: the wall and CPU seconds of each step of
`data/ingest/build.py` and of each DuckDB statement, the temporary folder's largest size during
each statement (sampled every 0.3 s), the peak resident memory, and a hash of the prepared arrays
(equal hashes: the same dataset).

    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/profile_prepare.py LOG [MEMORY_LIMIT [PART_ROWS]]

LOG is a log folder of `basketgnn synth` (columns customer_id, basket_id, timestamp, item_id,
quantity), prepared with the default options; PART_ROWS sets the rows per customer part (default: the
engine's). An A/B of two codes runs this script twice with
``PYTHONPATH`` set to each checkout, alternating (BENCHMARKS.md §26).
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np

import basketgnn.data.ingest.build as build
import basketgnn.data.ingest.duckdb_engine as engine
from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log

STEPS = ["code_rows", "code_part", "basket_entries", "item_counts", "drop_rare_items", "cap_baskets",
         "number_baskets", "keep_baskets", "kept_entries", "item_map", "stream_dataset_arrays"]  # fmt: skip
ROWS: list[tuple[str, str, float, float, float]] = []  # (kind, text, wall s, CPU s, temp GB)
TEMP = {"dir": Path(), "peak": 0}


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def watch_temp() -> None:
    while True:
        size = 0
        for root, _, files in os.walk(TEMP["dir"]):
            for f in files:
                try:
                    size += os.path.getsize(os.path.join(root, f))
                except OSError:
                    pass
        TEMP["peak"] = max(TEMP["peak"], size)
        time.sleep(0.3)


class TimedConnection:
    """A DuckDB connection whose ``execute`` records each statement's times and temp disk."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def __getattr__(self, name: str):
        return getattr(self._con, name)

    def execute(self, query: str, *args, **kwargs):
        TEMP["peak"] = 0
        wall, c = time.time(), cpu()
        out = self._con.execute(query, *args, **kwargs)
        ROWS.append(("sql", query[:100].replace("\n", " "), time.time() - wall, cpu() - c, TEMP["peak"] / 1e9))
        return out


def timed(module, name: str) -> None:
    f = getattr(module, name)

    def step(*args, **kwargs):
        wall, c = time.time(), cpu()
        out = f(*args, **kwargs)
        ROWS.append(("STEP", name, time.time() - wall, cpu() - c, 0.0))
        return out

    setattr(module, name, step)


def main() -> None:
    log, memory = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "3GB"
    engine_args = {"part_rows": int(sys.argv[3])} if len(sys.argv) > 3 else {}
    connect = duckdb.connect
    engine.duckdb.connect = lambda *a, **k: TimedConnection(connect(*a, **k))
    for name in STEPS:
        if hasattr(build, name):  # an older checkout has other steps
            timed(build, name)
    for name in ("stage", "validate", "build"):
        timed(engine, name)
    TEMP["dir"] = Path(tempfile.mkdtemp(prefix="profile-prepare-"))
    threading.Thread(target=watch_temp, daemon=True).start()
    out = Path(tempfile.mkdtemp(prefix="profile-prepare-out-")) / "arrays.npz"
    columns = Columns(customer="customer_id", item="item_id", basket="basket_id", timestamp="timestamp",
                      quantity="quantity")  # fmt: skip
    t0 = time.time()
    data = prepare_log(log, columns, PrepareOptions(), memory_limit=memory, temp_dir=TEMP["dir"], arrays_file=out,
                       **engine_args)
    wall = time.time() - t0
    peak_temp = max((r[4] for r in ROWS if r[0] == "sql"), default=0.0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"TOTAL {wall:.1f}s cpu {cpu():.1f} peak_tmp_GB {peak_temp:.2f} maxrss_GB {rss:.2f}", flush=True)
    for kind, text, w, c, tmp in ROWS:
        if w > 0.5:
            print(f"{kind:5s} {w:8.1f} {c:8.1f}  " + (f"tmp {tmp:.2f}GB " if kind == "sql" else "") + text)
    digest = hashlib.sha256()
    for name in ("items", "basket_offsets", "user_offsets", "basket_times", "user_ids", "item_ids"):
        digest.update(np.ascontiguousarray(np.asarray(getattr(data, name))).tobytes())
    print("ARRAYS", digest.hexdigest()[:16], len(data.items), len(data.user_ids), flush=True)
    shutil.rmtree(out.parent, ignore_errors=True)
    shutil.rmtree(TEMP["dir"], ignore_errors=True)


if __name__ == "__main__":
    main()
