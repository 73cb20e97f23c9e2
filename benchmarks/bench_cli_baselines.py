"""The baselines on the published splits through the real CLI, timed as a user runs them.

    .venv/bin/python benchmarks/bench_cli_baselines.py [--data DC TaFeng /tmp/real/realistic]

For each published split: `basketgnn prepare <file>.json --out DIR` once (a prepared dataset
folder is used as it is), then
`basketgnn evaluate --data DIR --model NAME --output FILE.json` per baseline. Wall times are
of the whole commands (Python start-up and imports included); metrics come from the JSON files.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import append_result, shared_dataset

MODELS = ["g-topfreq", "p-topfreq", "tifu-knn", "up-cf"]


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="*", default=["DC", "TaFeng"])
    args = ap.parse_args()
    cli = [sys.executable, "-m", "basketgnn.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.data:
            if Path(name).is_dir():  # a prepared dataset folder, named by its last part
                ds, name, prepare_s = Path(name), Path(name).name, 0.0
            else:
                ds = Path(tmp) / name
                prepare_s = timed([*cli, "prepare", str(shared_dataset(name)), "--out", str(ds)])
            for model in MODELS:
                out = Path(tmp) / f"{name}-{model}.json"
                evaluate_s = timed([*cli, "evaluate", "--data", str(ds), "--model", model, "--output", str(out)])
                result = json.loads(out.read_text())
                row = {"bench": "cli_baselines", "data": name, "model": model,
                       "prepare_wall_s": round(prepare_s, 2), "evaluate_wall_s": round(evaluate_s, 2),
                       "params": result["params"], "metrics": result["metrics"], "split": result["split"]}
                m = result["metrics"]
                print(name, model, f"prepare {prepare_s:.1f}s evaluate {evaluate_s:.1f}s",
                      " ".join(f"{k}={m[k]:.4f}" for k in ("recall@10", "ndcg@10", "phr@10")))
                append_result("cli_baselines", row)


if __name__ == "__main__":
    main()
