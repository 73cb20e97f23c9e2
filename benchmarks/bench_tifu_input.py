"""TIFU-KNN's score as an input of DNNTSP: a measured lever, not a product option.

Each user-node (an item of the customer's own window) reads one more repeat feature: TIFU-KNN's
score of that customer and item, divided by the customer's largest TIFU score (so in [0, 1];
0 outside TIFU's kept top 200). Its weight in the scorer's repeat term starts at ``--w0`` (the
other repeat weights start at 0, as in the product), so training starts from TIFU's ranking of
the customer's own items and the network learns what to add to it. Items outside the window
get no TIFU term, so the scores keep the shared form (one row for everyone plus each
customer's own items) and the shared-form loss trains it.

TIFU-KNN's scores come from the training customers' pool (``TifuScorer.build`` on the split's
training part, a customer never its own neighbour) with the parameters the TIFU-KNN baseline
chose on validation (``--tifu``: an ``evaluate --model tifu-knn --output`` file). The model is
trained, fused with TIFU-KNN and evaluated in this process exactly as ``basketgnn train`` and
``basketgnn evaluate`` do (``workflow.training.train``, ``workflow.experiment.evaluate``): the
fusion and every choice on the validation customers; the test customers only read afterwards.

The model's spec is swapped in this process only (its batches carry the TIFU feature, its module
reads it); nothing of the package changes. One JSON line per run goes to
``results/tifu_input.jsonl``::

    python benchmarks/bench_tifu_input.py --data DATA --tifu TIFU.json --seeds 0 1 2 \
        --label cj-tifu-input --set item_prior=true
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from common import append_result

import basketgnn.models.dnntsp as dnntsp
from basketgnn.data.ingest import load_data
from basketgnn.data.split import Instances, make_split
from basketgnn.graph.cooccurrence import GraphBatch
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.tifu import TifuParams
from basketgnn.workflow.experiment import evaluate
from basketgnn.workflow.training import ModelEntry, train

PLAIN = dnntsp.SPEC


@dataclasses.dataclass(frozen=True)
class TifuBatch(GraphBatch):
    """A DNNTSP batch plus each user-node's scaled TIFU score. Shapes: node_tifu [M] float32."""

    node_tifu: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> TifuBatch:
        plain = GraphBatch(**{f.name: getattr(self, f.name) for f in dataclasses.fields(GraphBatch)})
        moved = plain.to(device)
        values = {f.name: getattr(moved, f.name) for f in dataclasses.fields(GraphBatch)}
        batch = TifuBatch(**values, node_tifu=self.node_tifu.to(device))
        if "attention" in moved.__dict__:  # the tensor path's buckets, built for a device
            batch.__dict__["attention"] = moved.__dict__["attention"]
        return batch


class TifuSource:
    """DNNTSP's batch source whose batches also carry each node's TIFU score, looked up in the
    instances' kept TIFU scores (sorted keys instance * I + item)."""

    def __init__(self, inner, keys: np.ndarray, values: np.ndarray, n_items: int) -> None:
        self.inner, self.keys, self.values, self.n_items = inner, keys, values, n_items

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)

    def collate(self, idx: np.ndarray, with_targets: bool = True) -> TifuBatch:
        batch = self.inner.collate(idx, with_targets)
        idx = np.asarray(idx, dtype=np.int64)
        wanted = idx[batch.node_user.numpy()] * self.n_items + batch.node_item.numpy()  # [M]
        pos = np.minimum(np.searchsorted(self.keys, wanted), max(len(self.keys) - 1, 0))
        hit = self.keys[pos] == wanted if len(self.keys) else np.zeros(len(wanted), bool)
        tifu = np.where(hit, self.values[pos] if len(self.keys) else 0, 0).astype(np.float32)
        values = {f.name: getattr(batch, f.name) for f in dataclasses.fields(GraphBatch)}
        return TifuBatch(**values, node_tifu=torch.from_numpy(tifu))


class TifuInputDNNTSP(dnntsp.DNNTSP):
    """DNNTSP whose repeat features end with the node's TIFU score (batch.node_tifu)."""

    def _node_features(self, batch: TifuBatch, z: torch.Tensor) -> torch.Tensor:
        phi = super()._node_features(batch, z)  # [M, 4 + K]
        return torch.cat([phi, batch.node_tifu.to(z.dtype).unsqueeze(1)], dim=1)  # [M, 5 + K]


def tifu_spec(scorer: TifuScorer, alpha: float, w0: float):
    """DNNTSP's spec with the TIFU feature in its batches and its module."""
    plain_batches = PLAIN.batches

    def batches(data, instances: Instances, config, with_targets: bool) -> TifuSource:
        kept = scorer.scores(data, instances)[alpha]
        rows = np.repeat(np.arange(len(kept), dtype=np.int64), np.diff(kept.offsets))
        keys = rows * data.n_items + kept.items
        order = np.argsort(keys, kind="stable")
        return TifuSource(plain_batches(data, instances, config, with_targets), keys[order],
                          kept.values[order].astype(np.float32), data.n_items)  # fmt: skip

    def build(n_items: int, config) -> TifuInputDNNTSP:
        if not config.repeat_features:
            raise SystemExit("the TIFU input is a repeat feature: keep repeat_features: true")
        module = TifuInputDNNTSP.from_config(n_items, config)
        w = module.scorer.repeat.data
        module.scorer.repeat = torch.nn.Parameter(torch.cat([w, w.new_tensor([w0])]))
        return module

    return dataclasses.replace(PLAIN, batches=batches, build=build)


def run(args: argparse.Namespace, seed: int, sets: dict) -> dict:
    data = load_data(args.data)
    sp = make_split(data, "temporal")
    tp = json.loads(Path(args.tifu).read_text())["params"]
    params = TifuParams(k=tp["k"], m=tp["m"], r_b=tp["r_b"], r_g=tp["r_g"], alpha=tp["alpha"],
                        pool_cap=tp.get("pool_cap"), pool_seed=tp.get("pool_seed", 0))  # fmt: skip
    use = args.w0 is not None
    dnntsp.SPEC = tifu_spec(TifuScorer.build(data, sp["train"], params), params.alpha, args.w0) if use else PLAIN
    # The folder names what the run trains, so a rerun with other options never resumes it.
    feature = "plain" if not use else f"w0-{args.w0:g}-k{params.k}-m{params.m}-a{params.alpha:g}"
    out_dir = Path(args.work) / f"{args.label}-{feature}-seed{seed}"
    t0 = time.perf_counter()
    outcome = train(ModelEntry("dnntsp", {"seed": seed, **sets}, out_dir=out_dir), data, sp)
    fit_s = time.perf_counter() - t0
    epochs = [json.loads(x) for x in (out_dir / "train_log.jsonl").read_text().splitlines() if x.strip()]
    best = outcome.training.best_epoch
    at_best = next(e for e in epochs if e["epoch"] == best)
    module = outcome.recommender.base.model if hasattr(outcome.recommender, "base") else outcome.recommender.model
    row = {
        "label": args.label, "data": str(args.data), "seed": seed, "w0": args.w0, "tifu": tp, "sets": sets,
        "fit_s": round(fit_s, 1), "best_epoch": best, "epochs_run": outcome.training.epochs_run,
        "s_to_best": round(sum(e["train_s"] + e["validate_s"] for e in epochs if e["epoch"] <= best), 1),
        "alone_validate": {k: at_best[f"val_{k}"] for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20")},
        "alone_recall@10_by_epoch": [e["val_recall@10"] for e in epochs[:8]],
        "fusion": outcome.fusion and {k: outcome.fusion.get(k) for k in ("weight", "description")},
        "tifu_weight": round(float(module.scorer.repeat[-1]), 4) if use else None,
    }  # fmt: skip
    for part in ("validate", "test"):
        row[part] = evaluate(outcome, data, sp, part).metrics
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a prepared data folder (temporal split)")
    ap.add_argument("--tifu", required=True, help="the TIFU-KNN baseline's evaluate --output JSON (its params)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--label", required=True)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--w0", type=float, default=4.0, help="the TIFU feature's starting weight")
    which.add_argument("--control", action="store_true", help="train the plain model (no TIFU feature)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a DNNTSP config key")
    ap.add_argument("--work", default="/tmp/bench_tifu_input")
    args = ap.parse_args()
    if args.control:
        args.w0 = None
    sets = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    for seed in args.seeds:
        row = run(args, seed, sets)
        append_result("tifu_input", row)
        shown = {k: row[k] for k in ("seed", "best_epoch", "s_to_best", "alone_validate", "tifu_weight")}
        print(json.dumps(shown), {p: {k: row[p][k] for k in ("recall@10", "ndcg@10")} for p in ("validate", "test")},
              file=sys.stderr, flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
