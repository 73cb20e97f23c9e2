"""The batch pipeline on a ~1,000,000-row synthetic log: wall time per stage and peak memory.

    .venv/bin/python benchmarks/bench_pipeline.py [--customers 26000] [--workdir /tmp/bgnn-pipeline-1m]

Generates the log once (CSV, not timed), writes a job YAML (DuckDB ingestion, temporal split,
all baselines, DNNTSP with the default config and a 40-epoch cap, top-20 for every customer),
runs `basketgnn pipeline` in a child process (peak RSS of that process), then runs it again to
time the fully cached rerun.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml
from common import append_result

from basketgnn.data.synth import generate_log, write_log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--customers", type=int, default=26_000)
    ap.add_argument("--workdir", default="/tmp/bgnn-pipeline-1m")
    ap.add_argument("--epochs", type=int, default=40)
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.csv"
    if not log.exists():
        write_log(generate_log(n_customers=args.customers, n_items=5000, mean_baskets=10, seed=0), log)
    job = {
        "run_dir": str(work / "run"),
        "input": {"path": str(log), "engine": "duckdb"},
        "split": {"kind": "temporal"},
        "models": {"baselines": ["g-topfreq", "p-topfreq", "tifu-knn"],
                   "dnntsp": {"epochs": args.epochs}},
        "recommend": {"k": 20, "model": "dnntsp"},
        "report": {"title": "1M-row synthetic log"},
    }
    spec = work / "job.yaml"
    spec.write_text(yaml.safe_dump(job))
    cmd = [sys.executable, "-m", "basketgnn.cli", "pipeline", str(spec), "--no-progress"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    first = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rerun = time.perf_counter() - t0
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    record = {
        "bench": "pipeline_1m",
        "rows": sum(1 for _ in open(log)) - 1,
        "first_run_s": round(first, 1),
        "cached_rerun_s": round(rerun, 1),
        "peak_rss_mb": round(peak_mb),
        "stage_seconds": metrics["timing_s"],
        "data": metrics.get("data"),
        "models": {m["model"]: {k: m["metrics"].get(k) for k in ("recall@10", "ndcg@10", "phr@10")}
                   for m in metrics.get("models", [])},
    }
    print(json.dumps(record, indent=1))
    append_result("pipeline", record)


if __name__ == "__main__":
    main()
