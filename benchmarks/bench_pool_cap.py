"""TIFU-KNN with a capped neighbour pool against the exact search (every training customer).

    .venv/bin/python benchmarks/bench_pool_cap.py --data DC --caps 1000 5000 20000 0
    # a prepared big log (temporal split), on a seeded sample of 5,000 test customers:
    .venv/bin/python benchmarks/bench_pool_cap.py --prepared RUN/stages/prepare-*/data --name realistic-100k
    .venv/bin/python benchmarks/bench_pool_cap.py --summary

Per dataset (published DNNTSP splits) and pool cap (0 = every training customer, the exact
search), with TIFU-KNN tuned on the validation users as usual (k, α, m, r_b, r_g):

- the end metrics, recall / NDCG / PHR at 10 and 20 on the test users;
- neighbour overlap with the exact search (or, when every training customer is too many to
  search, with the largest cap listed): with that run's tuned parameters, the share of each test
  user's k nearest training customers there that the capped pool's k nearest also holds (mean
  over test users), and the same for the 20 nearest;
- fit (tuning included) and scoring seconds.

Rows go to benchmarks/results/pool_cap.jsonl. Pool samples use seed 0 (``TifuKnn(pool_seed=0)``).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from common import RESULTS, append_result, peak_rss_mb, shared_dataset

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import Instances, make_split
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.scoring.tifu import (
    NeighbourIndex,
    TifuParams,
    capped_pool,
    customer_vectors,
    pool_vectors,
    query_chunks,
)
from basketgnn.workflow.harness import evaluate_model

CELLS = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]


def nearest_sets(
    data: BasketData, train: Instances, test: Instances, p: TifuParams, k: int
) -> np.ndarray:
    """Each test user's k nearest pool rows, as user indices. Shapes: -> [n_test, k]."""
    index = NeighbourIndex(pool_vectors(data, train, p.m, p.r_b, p.r_g), train.users)
    own = customer_vectors(data.histories(test.users, test.n_history), data.n_items, p.m, p.r_b, p.r_g)
    out = np.full((len(test), k), -1, dtype=np.int64)
    for rows, _, nbrs in query_chunks(index, own, test.users, k):
        out[rows] = np.where(nbrs >= 0, train.users[np.maximum(nbrs, 0)], -1)
    return out


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Mean share of each row of a (valid entries) also in the same row of b."""
    shares = [len(np.intersect1d(x[x >= 0], y[y >= 0])) / max((x >= 0).sum(), 1) for x, y in zip(a, b)]
    return float(np.mean(shares))


def run(name: str, caps: list[int], prepared: str | None = None, test_sample: int = 5000) -> None:
    if prepared is None:
        data = read_dnntsp_json(shared_dataset(name))
        split = make_split(data)
    else:
        data = BasketData.load(prepared)
        split = make_split(data, "temporal")
    train, validate, test = split["train"], split["validate"], split["test"]
    if len(test) > test_sample:
        keep = np.sort(np.random.default_rng(0).choice(len(test), size=test_sample, replace=False))
        test = Instances(test.users[keep], test.n_history[keep])
    exact_params: TifuParams | None = None
    exact_sets: dict[int, np.ndarray] = {}
    # The largest pool first (0 = every training customer): the overlap's reference.
    ordered = sorted(caps, key=lambda c: len(train) if c == 0 else min(c, len(train)), reverse=True)
    for cap in ordered:
        pool_cap = None if cap == 0 else cap
        t0 = time.perf_counter()
        model = TifuKnn(pool_cap=pool_cap).fit(data, train, validate)
        fit_s = time.perf_counter() - t0
        metrics, score_s = evaluate_model(model, data, test)
        record = {
            "data": name, "pool_cap": pool_cap, "train_customers": len(train),
            "pool_size": len(capped_pool(train, pool_cap)), "test_customers": len(test),
            "params": model.params(),
            **{c: round(metrics[c], 4) for c in CELLS},
            "fit_s": round(fit_s, 2), "score_s": round(score_s, 2),
            "peak_rss_mb": round(peak_rss_mb()),
        }  # fmt: skip
        if cap == ordered[0]:
            exact_params = model.tifu_params
            record["overlap_reference"] = True
        if exact_params is not None:
            p = exact_params
            for k in sorted({p.k, 20}):
                if cap == ordered[0]:
                    exact_sets[k] = nearest_sets(data, capped_pool(train, pool_cap, 0), test, p, k)
                    record[f"overlap@{k}"] = 1.0
                else:
                    pool = capped_pool(train, pool_cap, 0)
                    record[f"overlap@{k}"] = round(overlap(exact_sets[k], nearest_sets(data, pool, test, p, k)), 4)
            record["overlap_params"] = {"k": p.k, "m": p.m, "r_b": p.r_b, "r_g": p.r_g}
        append_result("pool_cap", record)
        print(json.dumps(record))


def summary() -> None:
    rows = [json.loads(line) for line in (RESULTS / "pool_cap.jsonl").read_text().splitlines()]
    print("| data | pool cap | pool | k | overlap@k | overlap@20 | " + " | ".join(CELLS) + " | fit s | score s |")
    print("|---" * (8 + len(CELLS)) + "|")
    for r in rows:
        k = r["params"]["k"]
        ok = r.get("overlap_params", {}).get("k", k)
        print(
            f"| {r['data']} | {r['pool_cap'] or 'all'} | {r['pool_size']:,} | {k} | "
            f"{r.get(f'overlap@{ok}', float('nan')):.3f} | {r.get('overlap@20', float('nan')):.3f} | "
            + " | ".join(f"{r[c]:.4f}" for c in CELLS)
            + f" | {r['fit_s']:.0f} | {r['score_s']:.0f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", choices=["DC", "TaFeng"])
    ap.add_argument("--prepared", help="a prepared dataset folder instead (temporal split)")
    ap.add_argument("--name", default="", help="its name in the results")
    ap.add_argument("--test-sample", type=int, default=5000, help="test customers, seeded sample")
    ap.add_argument("--caps", type=int, nargs="+", default=[1000, 5000, 20000, 0])
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)  # shared 2-core machine: no spin-waiting
    if args.summary:
        summary()
    elif args.prepared:
        run(args.name or args.prepared, args.caps, args.prepared, args.test_sample)
    elif args.data:
        run(args.data, args.caps, None, args.test_sample)
    else:
        ap.error("give --data or --summary")


if __name__ == "__main__":
    main()
