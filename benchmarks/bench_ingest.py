"""Ingestion at scale: prepare a ~1,000,000-row synthetic transaction log.

    .venv/bin/python benchmarks/bench_ingest.py [--customers 26000] [--format csv|parquet] [--engine pandas|duckdb]

The log is generated first (not timed); then preparation (read, validate, build, save) runs in
its own process so its wall time and peak memory (ru_maxrss of that process, imports included)
are measured alone.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import append_result

from basketgnn.data.synth import generate_log, write_log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--customers", type=int, default=26_000)
    ap.add_argument("--items", type=int, default=5_000)
    ap.add_argument("--format", choices=["csv", "parquet"], default="csv")
    ap.add_argument("--engine", choices=["pandas", "duckdb"], default="pandas")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / f"log.{args.format}"
        df = generate_log(n_customers=args.customers, n_items=args.items, mean_baskets=10, seed=0)
        write_log(df, log)
        rows = len(df)
        del df
        code = (
            "import sys, resource; from basketgnn.data.ingest import prepare_log; "
            "from basketgnn.data.ingest_duckdb import prepare_log_duckdb; "
            f"d = ({'prepare_log_duckdb' if args.engine == 'duckdb' else 'prepare_log'})(sys.argv[1]); "
            "d.save(sys.argv[2])"
        )
        cmd = [sys.executable, "-c", code, str(log), str(Path(tmp) / "ds")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    record = {"bench": "ingest", "rows": rows, "format": args.format, "engine": args.engine,
              "prepare_wall_s": round(wall, 2), "prepare_peak_rss_mb": round(peak_mb)}
    print(record)
    append_result("ingest", record)


if __name__ == "__main__":
    main()
