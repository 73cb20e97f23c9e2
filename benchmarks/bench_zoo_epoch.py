"""Epoch time of every neural model on a published split, through `basketgnn train`, one at a
time (run it under the shared machine's timing lock, at normal priority):

    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_zoo_epoch.py --data DC TaFeng \
        --models dnntsp sasrec bert4rec din --epochs 2 [--code /tmp/zoo-old --label old]

Each model trains ``--epochs`` epochs with its default options plus ``threads: 1`` and
``fusion: off`` (the add-on runs once after training, not per epoch); the row holds the engine's
``train_s`` (training batches) and ``validate_s`` of every epoch from train_log.jsonl, their
medians, and the load average. ``--code DIR`` runs the package found in DIR (e.g. an older
commit from `git archive`) instead of this checkout's. One JSON line per (data, model) in
benchmarks/results/zoo_epoch.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import PROJECT, append_result, shared_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="*", default=["DC", "TaFeng"])
    ap.add_argument("--models", nargs="*", default=["dnntsp", "sasrec", "bert4rec", "din"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--code", type=Path, default=PROJECT, help="folder holding the basketgnn package to run")
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--set", nargs="*", default=[], help="extra config lines key=value")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.code)}
    for data in args.data:
        for model in args.models:
            with tempfile.TemporaryDirectory() as tmp:
                config = Path(tmp) / "config.yaml"
                config.write_text("threads: 1\nfusion: 'off'\n" + "".join(f"{kv.replace('=', ': ', 1)}\n" for kv in args.set))
                load = os.getloadavg()
                subprocess.run(
                    [sys.executable, "-m", "basketgnn", "train", "--model", model, "--data", str(shared_dataset(data)),
                     "--out", f"{tmp}/run", "--config", str(config), "--epochs", str(args.epochs), "--no-progress"],
                    env=env, cwd=tmp, check=True, stdout=subprocess.DEVNULL,
                )
                log = [json.loads(line) for line in Path(f"{tmp}/run/train_log.jsonl").read_text().splitlines()]
            row = {
                "data": data, "model": model, "code": args.label, "set": args.set, "epochs": len(log),
                "train_s": [r["train_s"] for r in log], "validate_s": [r["validate_s"] for r in log],
                "train_s_median": statistics.median(r["train_s"] for r in log),
                "validate_s_median": statistics.median(r["validate_s"] for r in log),
                "load_before": [round(x, 1) for x in load], "load_after": [round(x, 1) for x in os.getloadavg()],
            }
            print(json.dumps(row), flush=True)
            append_result("zoo_epoch", row)


if __name__ == "__main__":
    main()
