"""The module's forward in scoring with absent rows shared across customers (``share_absent``,
what `recommend` builds) against one absent row per node, paired in one process: the rows the
GCN and the attention's projection compute, the forward's seconds, and whether the shared
scores are equal.

    flock /tmp/basketgnn-timing.lock python benchmarks/bench_absent_rows.py \\
        /tmp/s28/zoo/realistic-dnntsp-s0 /tmp/s28/zoo/TaFeng-dnntsp-s0 /tmp/s28/zoo/DC-dnntsp-s0 \\
        --rounds 7 --tag quiet

For each trained run folder (best.pt and split.json) every customer of its data is scored from
the full history, as `recommend` does, on one thread: graph building once per layout, then
``--rounds`` alternating forward passes of each layout (the shared scores of every batch of
``recommenders.neural.SCORE_BATCH`` customers, graph batching included). One JSON line per run goes
to benchmarks/results/absent_rows.jsonl: both layouts' rows, per-round seconds, medians and
minima, and the largest difference of the shared scores (0.0: the same bits).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scoring import shared_from  # noqa: E402
from common import append_result, load_run  # noqa: E402

from basketgnn.recommenders.neural import SCORE_BATCH  # noqa: E402


def rows_of(source) -> int:
    """Rows the GCN computes over all scoring batches of ``source``."""
    from basketgnn.engine.batching import length_batches

    return sum(source.collate(idx, with_targets=False).num_rows for idx in length_batches(source.lengths, SCORE_BATCH, None))


def largest_difference(a, b) -> float:
    """The largest absolute difference between two SharedScores' arrays (inf if shapes differ)."""
    worst = 0.0
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if x.shape != y.shape:
                return float("inf")
            if x.size:
                worst = max(worst, float(np.abs(x.astype(np.float64) - y).max()))
    return worst


def measure(run: Path, rounds: int) -> dict:
    import torch

    from basketgnn.data.split import Instances

    torch.set_num_threads(1)
    rec, data, _ = load_run(run, model_only=True)
    users = np.arange(data.n_users, dtype=np.int64)
    inst = Instances(users, data.n_baskets_per_user.astype(np.int64))
    shared = rec.spec.batches(data, inst, rec.config, False)
    if not shared.share_absent:
        sys.exit(f"{run}: this checkout's scoring source does not share absent rows")
    layouts = {"per_node": dataclasses.replace(shared, share_absent=False), "shared": shared}
    device = torch.device("cpu")
    first = {name: shared_from(rec, src, len(inst), device) for name, src in layouts.items()}
    seconds: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(rounds):
        for name, src in layouts.items():
            t = time.perf_counter()
            shared_from(rec, src, len(inst), device)
            seconds[name].append(round(time.perf_counter() - t, 4))
    return {
        "run": str(run), "customers": int(data.n_users), "rows": {n: rows_of(s) for n, s in layouts.items()},
        "seconds": seconds, "median_s": {n: statistics.median(v) for n, v in seconds.items()},
        "min_s": {n: min(v) for n, v in seconds.items()},
        "largest_score_difference": largest_difference(first["per_node"], first["shared"]),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+", help="trained run folders (best.pt, split.json)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tag", default="")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    for run in args.runs:
        load = os.getloadavg()[0]
        record = {"tag": args.tag, **measure(run, args.rounds), "load_1m": round(load, 2)}
        print(record, flush=True)
        if not args.no_record:
            append_result("absent_rows", record)


if __name__ == "__main__":
    main()
