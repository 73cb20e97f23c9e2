"""Seconds of `metrics.top_k` on one scoring batch (2048 customers x 4935 items, TaFeng's
catalogue), against `np.argsort(..., kind="stable")` (the definition) and against the k-th value
by `np.partition` alone (what the previous top_k spent most of its time on).

    python benchmarks/bench_top_k.py [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from basketgnn.metrics import top_k  # noqa: E402
from benchmarks.common import append_result  # noqa: E402


def best_of(repeats: int, fn, *args) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return round(min(times), 4)


def partition_kth(scores: np.ndarray, k: int) -> np.ndarray:
    cut = scores.shape[1] - k
    return np.partition(scores, cut, axis=1)[:, cut]


def stable_argsort(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--items", type=int, default=4935)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        scores = rng.standard_normal((args.rows, args.items)).astype(dtype)
        assert np.array_equal(top_k(scores, args.k), stable_argsort(scores, args.k))
        record = {
            "rows": args.rows, "items": args.items, "k": args.k, "dtype": np.dtype(dtype).name,
            "threads": args.threads, "load_1m": round(os.getloadavg()[0], 2), "tag": args.tag,
            "top_k_s": best_of(args.repeats, top_k, scores, args.k),
            "np_partition_kth_s": best_of(args.repeats, partition_kth, scores, args.k),
            "argsort_s": best_of(1, stable_argsort, scores, args.k),
        }  # fmt: skip
        print(record)
        append_result("top_k", record)


if __name__ == "__main__":
    main()
