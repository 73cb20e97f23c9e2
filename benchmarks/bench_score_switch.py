"""Paired A/B of scoring with two switches on and off, in one process: `recommend`'s whole
code path (:func:`basketgnn.workflow.recommendations.write_recommendation_parts`) over every
customer of a checkpoint's data, the four settings alternating within each round (the order
rotated every round), wall and CPU seconds, and whether every setting wrote the same rows.

    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_score_switch.py \\
        --checkpoint /tmp/real/run/best.pt --threads 2 --rounds 7

Switches (class attributes the benchmarks set to False):
``fold``: ``WeightedGCN.folded_inference``, the GCN's BatchNorm folded into its linear maps and
the sum, bias and ReLU in one compiled pass; ``longest_first``:
``NeuralRecommender.longest_first``, the scoring batches taken longest history first.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from common import append_result

from basketgnn.cli import _checkpoint_and_data
from basketgnn.data.split import Instances
from basketgnn.nn.weighted_gcn import WeightedGCN
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.workflow.recommendations import write_recommendation_parts

SETTINGS = list(itertools.product((False, True), repeat=2))  # (fold, longest_first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--data", type=Path, help="customers to score (default: the checkpoint's data)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--tag", default="")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()

    rec, data, _ = _checkpoint_and_data(args.checkpoint, args.data, None)
    rec.with_threads(args.threads)
    torch.set_num_threads(args.threads)
    times: dict[tuple[bool, bool], list[tuple[float, float]]] = {s: [] for s in SETTINGS}
    rows: dict[tuple[bool, bool], object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for fold, longest in SETTINGS[r % 4 :] + SETTINGS[: r % 4]:
                WeightedGCN.folded_inference, NeuralRecommender.longest_first = fold, longest
                if r == 0:  # each setting's one-time costs (compilation, the fusion's first search)
                    n = min(256, data.n_users)
                    rec.rank(data, Instances(np.arange(n), data.n_baskets_per_user[:n].astype(np.int64)), args.k)
                out = Path(tmp) / f"r{r}-{int(fold)}{int(longest)}"
                wall, cpu = time.perf_counter(), time.process_time()
                write_recommendation_parts(rec, data, args.k, out, chunk=100_000)
                times[(fold, longest)].append((time.perf_counter() - wall, time.process_time() - cpu))
                if r == 0:
                    rows[(fold, longest)] = pq.read_table(out).sort_by([("customer_id", "ascending"), ("rank", "ascending")])
    WeightedGCN.folded_inference, NeuralRecommender.longest_first = True, True
    reference = rows[(False, False)]
    for (fold, longest), t in times.items():
        wall = statistics.median(x[0] for x in t)
        record = {
            "checkpoint": str(args.checkpoint), "tag": args.tag, "threads": args.threads, "rounds": args.rounds,
            "fold": fold, "longest_first": longest, "customers": int(data.n_users),
            "wall_s_median": round(wall, 4), "wall_s_min": round(min(x[0] for x in t), 4),
            "cpu_s_median": round(statistics.median(x[1] for x in t), 4),
            "customers_per_s_median": round(data.n_users / wall),
            "same_items_as_neither": rows[(fold, longest)].column("item_id").equals(reference.column("item_id")),
            "load_1m": round(os.getloadavg()[0], 2),
        }  # fmt: skip
        print(record)
        if not args.no_record:
            append_result("score_switch", record)


if __name__ == "__main__":
    main()
