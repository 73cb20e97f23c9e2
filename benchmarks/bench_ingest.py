"""Ingestion at scale: prepare a ~1,000,000-row synthetic transaction log.

    .venv/bin/python benchmarks/bench_ingest.py [--customers 26000] [--format csv|parquet]
        [--options plain|export] [--code DIR] [--call MODULE:FUNCTION]

The log is generated first (not timed); then preparation (read, validate, build, save) runs in
its own process so its wall time, CPU time and peak memory (ru_maxrss of that process, imports
included) are measured alone.

``--options export`` makes every 20th row a return (quantity -1) and prepares
with ``--quantity-col``, a ``--where`` dropping two items and ``--max-basket-items 10``: the
cost of a real export's options. ``--code DIR`` runs the package found in DIR (e.g. another
checkout, to compare with older code in the same session) and ``--call`` names the function to
time there (``basketgnn.data.ingest:prepare_log`` by default; the older engines were
``basketgnn.data.ingest:prepare_log`` with pandas and
``basketgnn.data.ingest_duckdb:prepare_log_duckdb``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PROJECT, append_result

from basketgnn.data.synth import generate_log, write_log

EXPORT_OPTIONS = {"where": "item_id NOT IN ('I0000', 'I0001')", "max_basket_items": 10}

# Runs in the child process: argv = code dir, MODULE:FUNCTION, log, out folder, options JSON.
CHILD = """
import importlib, json, sys
import basketgnn
assert basketgnn.__file__.startswith(sys.argv[1]), (basketgnn.__file__, sys.argv[1])
module, function = sys.argv[2].split(":")
prepare = getattr(importlib.import_module(module), function)
options = json.loads(sys.argv[5])
if options:
    from basketgnn.data.ingest import Columns, PrepareOptions
    data = prepare(sys.argv[3], Columns(quantity="quantity"), PrepareOptions(**options))
else:
    data = prepare(sys.argv[3])
data.save(sys.argv[4])
"""


def _commit(code: Path) -> str:
    """The measured commit, "-dirty" when its package has uncommitted changes (the results file
    this script appends to does not count)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(code), *args], capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    commit = git("rev-parse", "--short=7", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain", "--", "basketgnn") else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--customers", type=int, default=26_000)
    ap.add_argument("--items", type=int, default=5_000)
    ap.add_argument("--format", choices=["csv", "parquet"], default="csv")
    ap.add_argument("--options", choices=["plain", "export"], default="plain")
    ap.add_argument("--code", type=Path, default=PROJECT)
    ap.add_argument("--call", default="basketgnn.data.ingest:prepare_log")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / f"log.{args.format}"
        df = generate_log(n_customers=args.customers, n_items=args.items, mean_baskets=10, seed=0)
        options: dict = {}
        if args.options == "export":
            df.loc[df.index % 20 == 0, "quantity"] = -1
            options = EXPORT_OPTIONS
        write_log(df, log)
        rows = len(df)
        del df
        cmd = [sys.executable, "-c", CHILD, str(args.code.resolve()), args.call, str(log),
               str(Path(tmp) / "ds"), json.dumps(options)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(args.code.resolve())}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        # Run from DIR: `python -c` puts the working folder first on sys.path.
        subprocess.run(cmd, check=True, env=env, cwd=args.code)
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        report = json.loads((Path(tmp) / "ds" / "meta.json").read_text()).get("report", {})
    record = {"bench": "ingest", "rows": rows, "format": args.format, "options": args.options,
              "call": args.call, "code": _commit(args.code),
              "prepare_wall_s": round(wall, 2),
              "prepare_user_s": round(usage.ru_utime - before.ru_utime, 2),
              "prepare_sys_s": round(usage.ru_stime - before.ru_stime, 2),
              "prepare_peak_rss_mb": round(usage.ru_maxrss / 1024),
              "load_1min": round(os.getloadavg()[0], 2), "report": report}  # fmt: skip
    print(record)
    append_result("ingest", record)


if __name__ == "__main__":
    main()
