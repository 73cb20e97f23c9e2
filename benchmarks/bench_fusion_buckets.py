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
import json
import sys
from pathlib import Path

import numpy as np
from common import append_result, by_run_group, mean_std, runs_without_row, tagged_rows

from basketgnn.data.ingest import load_data
from basketgnn.data.split import load_split
from basketgnn.recommenders.fused import CHOICE_CHUNK, FusionOptions
from basketgnn.scoring.fusion import DEFAULT_TOP
from basketgnn.scoring.fusion_choice import (
    FUSION_ALPHAS,
    FUSION_WEIGHTS,
    TRANSITION_WEIGHTS,
    _rank_grid,
    _score_grid,
    customer_metrics,
    select_point,
)
from basketgnn.scoring.tifu import TifuParams, tune_tifu
from basketgnn.scoring.transitions import OPTIONS as TRANSITION_OPTIONS
from basketgnn.workflow.training import load_trained

NAMES = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]


def grid_metrics(scores, data, train, instances, tifu, transitions: bool) -> tuple[object, dict]:
    """Every grid point's per-customer metrics on ``instances`` ({point: {name: [n]}})."""
    grid = _score_grid(data, train, instances, tifu, FUSION_WEIGHTS, FUSION_ALPHAS, DEFAULT_TOP,
                       transitions, TRANSITION_WEIGHTS, TRANSITION_OPTIONS)  # fmt: skip
    ranked = _rank_grid(scores, data, grid, "sigmoid", CHOICE_CHUNK)
    return grid, {key: customer_metrics(ranked[key], data, instances) for key in grid.points}


def one(run: Path, n_buckets: int) -> dict:
    rec = load_trained(run / "best.pt", "cpu", model_only=True)
    data, _ = load_data(Path(rec.checkpoint["data"])).aligned_to(rec.item_ids)
    split = load_split(run / "split.json", data)
    options = FusionOptions(**(rec.checkpoint.get("fusion_options") or {}))
    train, val, test = split["train"], split["validate"], split["test"]
    tifu, _ = tune_tifu(data, train, val, TifuParams(pool_cap=options.neighbour_pool_cap), sample=2000, seed=0)
    grid, on_val = grid_metrics(rec.validation_scores(data, val), data, train, val, tifu, options.transitions)
    _, on_test = grid_metrics(rec.score(data, test), data, train, test, tifu, options.transitions)
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
    out = ["| runs | fusion | λ chosen (short / middle / long) | val R@10 | test R@10 | N@10 | PHR@10 | R@20 | N@20 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, rs in by_run_group(tagged_rows("fusion_buckets", tag)).items():
        for kind in ("one", "groups"):
            chosen = "; ".join(
                f"{r['one']['weight']:g}" if kind == "one" else " / ".join(f"{p['weight']:g}" for p in r["groups"]["points"])
                for r in rs
            )
            test = [mean_std([r[kind]["test"][m] for r in rs]) for m in ("recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20")]
            out.append(f"| {name} ({len(rs)}) | {kind} | {chosen} | {mean_std([r[kind]['validation']['recall@10'] for r in rs])} | "
                       + " | ".join(test) + " |")
    return "\n".join(out)


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
    for run in runs_without_row(args.runs, "fusion_buckets", args.tag):
        row = {"tag": args.tag, "buckets": args.buckets, **one(run, args.buckets)}
        append_result("fusion_buckets", row)
        print(json.dumps({k: row[k] for k in ("run", "one", "groups")}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
