"""A per-customer fusion weight (issue 24's lever): the fusion chosen separately for customers of
short, middle and long histories (terciles of the validation customers' history lengths), each
group's point chosen on its own validation customers by the product's rule, against the one
choice for everyone. Nothing retrains: the fusion acts after training.

    .venv/bin/python benchmarks/bench_fusion_buckets.py RUN [RUN ...] [--buckets 3] [--tag TAG]
    .venv/bin/python benchmarks/bench_fusion_buckets.py --summary [--tag TAG]

RUN is a folder of `basketgnn train` (best.pt and split.json). For each run the model alone
scores the validation and test customers once, TIFU-KNN is tuned on validation as `train` does,
and every point of the fusion grid (λ, α, ν: `scoring.fusion_choice`'s grid, the run's options)
ranks both the validation and the test customers. The rule ("floor") then picks one point for
all validation customers (what `train` ships) and one per history-length group; each test
customer is ranked by its group's point. Test metrics are the means of the per-customer metrics
(`customer_metrics`), so the one-choice row equals the run's own test row. One JSON line per run
in benchmarks/results/fusion_buckets.jsonl; a run with a row under the tag is skipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from common import append_new_rows, load_run, mean_std, tagged_rows, variants_table

from basketgnn.recommenders.fused import CHOICE_CHUNK, FusionOptions
from basketgnn.scoring.fusion_choice import grid_metrics, select_point
from basketgnn.scoring.tifu import TifuParams, tune_tifu

NAMES = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]


def one(run: Path, n_buckets: int) -> dict:
    rec, data, split = load_run(run)
    options = FusionOptions(**(rec.checkpoint.get("fusion_options") or {}))
    train, val, test = split["train"], split["validate"], split["test"]
    tifu, _ = tune_tifu(data, train, val, TifuParams(pool_cap=options.neighbour_pool_cap), sample=2000, seed=0)
    kw = {"chunk": CHOICE_CHUNK, "transitions": options.transitions}  # as `train` chooses
    grid, on_val = grid_metrics(rec.validation_scores(data, val), data, train, val, tifu, **kw)
    _, on_test = grid_metrics(rec.score(data, test), data, train, test, tifu, **kw)
    one_key = select_point(on_val, grid.points, grid.alphas, "floor")[0]
    # History-length groups: terciles of the validation customers' lengths, the same edges for test.
    edges = np.quantile(np.asarray(val.n_history), np.arange(1, n_buckets) / n_buckets)
    group_val = np.searchsorted(edges, np.asarray(val.n_history), side="right")  # [n_val]
    group_test = np.searchsorted(edges, np.asarray(test.n_history), side="right")  # [n_test]
    keys, per_customer = [], {name: np.empty(len(test)) for name in NAMES}
    for g in range(n_buckets):
        mine = group_val == g
        if mine.sum() < 2:  # too few to choose: the one choice
            key = one_key
        else:
            sub = {k: {n: v[mine] for n, v in m.items()} for k, m in on_val.items()}
            key = select_point(sub, grid.points, grid.alphas, "floor")[0]
        keys.append(key)
        for name in NAMES:
            per_customer[name][group_test == g] = on_test[key][name][group_test == g]

    def point(key) -> dict:
        extra = grid.extras[key[2]]
        return {"weight": key[0], "alpha": key[1], "transition": 0.0 if extra is None else extra[0]}

    def means(values: dict) -> dict:
        return {name: round(float(np.mean(values[name])), 6) for name in NAMES}

    return {
        "run": str(run), "data": rec.checkpoint["data"], "n_validate": len(val), "n_test": len(test),
        "edges": edges.tolist(), "group_sizes_validate": np.bincount(group_val, minlength=n_buckets).tolist(),
        "one": {**point(one_key), "validation": means(on_val[one_key]), "test": means(on_test[one_key])},
        "groups": {"points": [point(k) for k in keys],
                   "validation": means({n: np.concatenate([on_val[k][n][group_val == g] for g, k in enumerate(keys)])
                                        for n in NAMES}),
                   "test": means(per_customer)},
    }  # fmt: skip


def summary(tag: str) -> str:
    """A Markdown table: per data set, the one choice and the groups' choices, test metrics mean ± std."""

    def cells(rs: list[dict], kind: str) -> list[str]:
        chosen = "; ".join(f"{r['one']['weight']:g}" if kind == "one"
                           else " / ".join(f"{p['weight']:g}" for p in r["groups"]["points"]) for r in rs)  # fmt: skip
        return [chosen, mean_std([r[kind]["validation"]["recall@10"] for r in rs])] + [
            mean_std([r[kind]["test"][m] for r in rs]) for m in ("recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20")]

    header = ["runs", "fusion", "λ chosen (short / middle / long)", "val R@10", "test R@10", "N@10", "PHR@10", "R@20", "N@20"]
    return variants_table(tagged_rows("fusion_buckets", tag), ["one", "groups"], header, cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--buckets", type=int, default=3)
    ap.add_argument("--tag", default="history-terciles")
    ap.add_argument("--summary", action="store_true", help="print the table of the tag's rows and exit")
    args = ap.parse_args()
    if args.summary:
        print(summary(args.tag))
        return
    append_new_rows(
        "fusion_buckets", args.runs, args.tag, lambda run: {"buckets": args.buckets, **one(run, args.buckets)},
        ["one", "groups"],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
