"""One process against DistributedDataParallel over N processes (torchrun, gloo on CPU): epoch
time and the test metrics of the trained checkpoint, per seed.

    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_ddp.py --data DC --seeds 0 1 2 --epochs 5

For every seed, in turn: `basketgnn train` in one process with ``--threads`` torch threads, then
`torchrun --standalone --nproc-per-node N -m basketgnn train` with ``threads / N`` threads per
process (the same cores), each followed by `basketgnn evaluate --checkpoint` on the test part.
Same config, batch size and lr for both (the engine splits each batch over the processes).
One JSON line per run to benchmarks/results/ddp.jsonl, with the 1-minute load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import PROJECT, append_result, shared_dataset


def run(cmd: list[str], threads: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "OMP_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=PROJECT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="DC")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads in all, split over the processes")
    ap.add_argument("--workdir", default="/tmp/bgnn-ddp")
    args = ap.parse_args()
    data = shared_dataset(args.data)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    for seed in args.seeds:
        for procs in (1, args.procs):
            threads = max(args.threads // procs, 1)
            out = work / f"{args.data}-seed{seed}-procs{procs}"
            cfg = work / f"threads{threads}.yaml"
            cfg.write_text(f"threads: {threads}\n")
            train = ["-m", "basketgnn", "train", "--data", str(data), "--config", str(cfg),
                     "--epochs", str(args.epochs), "--seed", str(seed), "--out", str(out), "--no-progress"]
            launcher = [sys.executable] if procs == 1 else [
                str(bin_dir / "torchrun"), "--standalone", "--nproc-per-node", str(procs)]
            for stale in ("resume.pt", "best.pt", "train_log.jsonl"):
                (out / stale).unlink(missing_ok=True)
            load_before = os.getloadavg()[0]
            train_wall = run(launcher + train, threads)
            test_json = out / "test.json"
            run([sys.executable, "-m", "basketgnn", "evaluate", "--checkpoint", str(out / "best.pt"),
                 "--output", str(test_json)], args.threads)
            model_json = out / "test_model_only.json"  # the network alone, without the fusion add-on
            run([sys.executable, "-m", "basketgnn", "evaluate", "--checkpoint", str(out / "best.pt"),
                 "--model-only", "--output", str(model_json)], args.threads)
            log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
            test = json.loads(test_json.read_text())["metrics"]
            test_model = json.loads(model_json.read_text())["metrics"]
            record = {
                "bench": "ddp", "data": args.data, "seed": seed, "processes": procs,
                "threads_per_process": threads, "epochs": args.epochs,
                "best_epoch": max((r for r in log), key=lambda r: r["val_mean_ndcg"])["epoch"],
                "epoch_train_s": [r["train_s"] for r in log],
                "epoch_validate_s": [r["validate_s"] for r in log],
                "train_loss": [r["train_loss"] for r in log],
                "val_mean_ndcg": [r["val_mean_ndcg"] for r in log],
                "train_command_s": round(train_wall, 1),
                "test": {k: round(v, 4) for k, v in test.items() if k.split("@")[0] in ("recall", "ndcg", "phr")},
                "test_model_only": {k: round(v, 4) for k, v in test_model.items()
                                    if k.split("@")[0] in ("recall", "ndcg", "phr")},
                "load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2),
            }
            append_result("ddp", record)
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
