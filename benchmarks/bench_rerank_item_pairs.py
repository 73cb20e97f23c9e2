"""A measured prototype, not a product feature: the re-ranking stage with two item co-occurrence features.

    .venv/bin/python benchmarks/bench_rerank_item_pairs.py --data DATA --runs RUN [RUN ...] \
        --variant loo [--split auto]

For candidate j of a customer whose history holds the distinct items H, with C_ij the number of
pool customers (TIFU-KNN's, the training customers) whose visible baskets (history and target)
hold both i and j, and d_i = C_ii:

    cos(i, j) = C_ij / sqrt(max(d_i, 1) · max(d_j, 1))      (0 for i = j)
    item_pairs_sum = log(1 + Σ_{i ∈ H} cos(i, j)),   item_pairs_max = max_{i ∈ H} cos(i, j)

``--top T`` keeps each item's T largest pair counts (the rest 0; the leave-out subtracts
only from kept pairs), as a stored table would. ``--variant loo`` leaves each pool customer's own sets out of C and d when its instances'
features are computed (training instances, and on a temporal split validation and test too):
without it, a training instance's target basket is inside C, and the network learns to trust
pairs its own target made. ``--variant all`` keeps them in; ``--variant none`` is the stage as
the product builds it (the reference for the same runs).

The stage is learned over each run's fused model as ``train`` does (``bench_rerank.run``, seed =
the run folder's trailing number), with :func:`basketgnn.scoring.rerank.candidate_features`
patched to add the two columns. C is dense [I, I] float32 and the features loop over instances
in Python: a measurement of the lever's accuracy, not of a cost the product would pay. One JSON
line per run goes to ``benchmarks/results/rerank_item_pairs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import scipy.sparse as sps
from bench_rerank import run
from common import append_result

from basketgnn.recommenders import reranked
from basketgnn.scoring import rerank
from basketgnn.scoring import rerank_features as rf

SHOWN = ("recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20")


class Pairs:
    """C and d over the pool, and each pool customer's visible item set (for ``loo``)."""

    counts: np.ndarray  # [I, I] float32 (each row's ``top`` largest off the diagonal, with ``top``)
    degree: np.ndarray  # [I] float32: C_ii
    own: dict[int, np.ndarray]
    leave_out: bool

    @classmethod
    def build(cls, data, train, leave_out: bool, top: int | None = None) -> Pairs:
        vis = data.histories(train.users, np.asarray(train.n_history) + 1).items_per_instance()
        rows = np.repeat(np.arange(len(train)), np.diff(vis.offsets))
        x = sps.csr_matrix((np.ones(len(rows), np.float32), (rows, vis.values.astype(np.int64))),
                           shape=(len(train), data.n_items))  # fmt: skip
        x.sum_duplicates()
        x.data[:] = 1.0
        p = cls()
        p.counts = (x.T @ x).toarray().astype(np.float32)
        p.degree = np.diag(p.counts).copy()
        np.fill_diagonal(p.counts, 0)
        if top is not None and top < data.n_items - 1:  # each row's top pairs by count (ties: any)
            drop = np.argpartition(-p.counts, top, axis=1)[:, top:]
            np.put_along_axis(p.counts, drop, 0, axis=1)
        p.own = {int(u): np.unique(vis.values[vis.offsets[k] : vis.offsets[k + 1]]) for k, u in enumerate(train.users)}
        p.leave_out = leave_out
        return p

    def columns(self, data, instances, items: np.ndarray) -> np.ndarray:
        """[n, C, 2]: item_pairs_sum, item_pairs_max (module docstring)."""
        hist = data.histories(instances.users, instances.n_history).items_per_instance()
        out = np.zeros((*items.shape, 2), np.float32)
        for r in range(len(instances)):
            h = np.unique(hist.values[hist.offsets[r] : hist.offsets[r + 1]])
            if len(h) == 0:
                continue
            j = items[r]
            c = self.counts[np.ix_(h, j)].copy()
            di, dj = self.degree[h].copy(), self.degree[j].copy()
            own = self.own.get(int(instances.users[r])) if self.leave_out else None
            if own is not None:
                oi, oj = np.isin(h, own), np.isin(j, own)
                c -= np.outer(oi, oj) * (c > 0)  # a pair the table keeps
                di -= oi
                dj -= oj
            cos = c / np.sqrt(np.maximum(di, 1))[:, None] / np.sqrt(np.maximum(dj, 1))[None, :]
            cos[h[:, None] == j[None, :]] = 0
            out[r, :, 0] = np.log1p(cos.sum(0))
            out[r, :, 1] = cos.max(0)
        return out


def patch(leave_out: bool, top: int | None = None) -> None:
    """The stage's features with the two columns appended; a stage ``train`` stored is set aside."""
    built: dict[str, Pairs] = {}
    features, stats_of = rerank.candidate_features, rf.ItemStats.of

    def of(data, train):
        built["pairs"] = Pairs.build(data, train, leave_out, top)
        return stats_of(data, train)

    def with_pairs(data, instances, items, scores, parts, stats):
        base = features(data, instances, items, scores, parts, stats)
        return np.concatenate([base, built["pairs"].columns(data, instances, items)], axis=-1)

    reranked.from_section = lambda shipped, section: shipped
    rerank.candidate_features = with_pairs
    rerank.FEATURES = rf.FEATURES + ("item_pairs_sum", "item_pairs_max")
    rerank.ItemStats.of = staticmethod(of)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", nargs="+", type=Path, required=True)
    ap.add_argument("--split", default="auto")
    ap.add_argument("--variant", choices=("none", "all", "loo"), default="loo")
    ap.add_argument("--top", type=int, default=None, help="keep each item's TOP pairs by count (default: all)")
    args = ap.parse_args()
    if args.variant != "none":
        patch(args.variant == "loo", args.top)
    for run_dir in args.runs:
        seed = int(re.search(r"(\d+)$", str(run_dir).rstrip("/")).group(1))
        row = run(args.data, args.split, run_dir, seed, f"item-pairs-{args.variant}")
        out = {"variant": args.variant, "top": args.top, "data": args.data, "run": str(run_dir), "seed": seed,
               "choice": {k: row["choice"][k] for k in ("kept", "validation_criterion", "shipped_criterion", "gain", "standard_error")},
               **{f"{p}_{w}": {k: row[f"{p}_{w}"][k] for k in SHOWN} for p in ("validate", "test") for w in ("shipped", "stage")}}  # fmt: skip
        append_result("rerank_item_pairs", out)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
