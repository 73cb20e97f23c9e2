"""DNNTSP fused with TIFU-KNN (scoring.fusion) against its parts and the baselines, from trained
checkpoints, so no variant retrains.

    # once per dataset and seed (the model does not depend on the fusion):
    basketgnn train --data ../shared/datasets/dnntsp/DC.json --seed 0 --out runs/fusion/DC-s0
    # then, for the checkpoints of one dataset:
    .venv/bin/python benchmarks/bench_fusion.py --data DC --runs runs/fusion/DC-s0 runs/fusion/DC-s1 ...
    .venv/bin/python benchmarks/bench_fusion.py --summary

Per checkpoint, on the test users, with every choice made on the validation users:
    model       DNNTSP's logits alone;
    tifu-fusion the default: choose_fusion on the validation logits, applied to test
                (``recommenders.fused.FusedRecommender`` around the model).
Per dataset once: tuned TIFU-KNN and P-TopFreq. Rows go to benchmarks/results/fusion.jsonl.
The neighbour add-on's variant ("neighbours") is no longer measured; its recorded rows still show in --summary.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from common import RESULTS, append_result, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import load_split
from basketgnn.engine.batching import score_source
from basketgnn.engine.trainer import setup_torch
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.registry import make_baseline
from basketgnn.scoring.fusion import ScoreFusion
from basketgnn.scoring.fusion_choice import choose_fusion, fusion_choice
from basketgnn.workflow.harness import evaluate_model, fit_and_evaluate
from basketgnn.workflow.training import load_trained

#: Fusion variants beside the default (chosen on validation in the same way).
VARIANTS: dict[str, dict] = {
    "tifu-fusion-best": {"rule": "best"},
    "tifu-fusion-1se": {"rule": "1se"},  # the default before the per-metric TIFU-KNN floor
    "tifu-fusion-minmax": {"transform": "minmax"},
    "tifu-fusion-fine": {"weights": tuple(np.round(np.arange(0, 1.0001, 0.025), 3))},
    "tifu-fusion-tuned-alpha": {"alphas": ()},
}
ONLY: set[str] = set()
TUNED: dict = {}
CELLS = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]
EXTRA = [f"{m}@{k}" for k in (30, 40) for m in ("recall", "phr")]


def headline(metrics: dict[str, float]) -> dict[str, float]:
    return {k: round(metrics[k], 4) for k in CELLS + EXTRA}


def validation_logits(rec: NeuralRecommender, data, instances) -> np.ndarray:
    """The checkpoint's module scores [n, I] (the model alone)."""
    source = rec.spec.batches(data, instances, rec.config, False)
    return score_source(rec.model, source, data.n_items, setup_torch(rec.config))


def fused(base: NeuralRecommender, fusion: ScoreFusion) -> FusedRecommender | NeuralRecommender:
    """``base`` ranked with ``fusion`` (``base`` itself when its weight is 0: the model alone)."""
    return FusedRecommender(base, fusion) if fusion.weight > 0 else base


def run_checkpoint(name: str, run: Path) -> None:
    rec = load_trained(run / "best.pt", model_only=True)
    data, dropped = read_dnntsp_json(shared_dataset(name)).aligned_to(rec.item_ids)
    assert dropped == 0
    split = load_split(rec.checkpoint["split_spec"], data)
    seed = rec.config.seed

    def record(ranker, variant: str, extra: dict) -> None:
        metrics, _ = evaluate_model(ranker, data, split["test"])
        print(name, seed, variant, headline(metrics))
        append_result("fusion", {"data": name, "seed": seed, "variant": variant, "run": str(run),
                                 "metrics": metrics, **extra})

    record(rec, "model", {})
    t0 = time.perf_counter()
    val = split["validate"]
    logits = validation_logits(rec, data, val)
    fusion = choose_fusion(logits, data, split["train"], val, tifu=TUNED.get(name))
    choose_s = time.perf_counter() - t0
    TUNED.setdefault(name, fusion.tuned_tifu)  # the same for every seed: tune once
    for variant, f in [("tifu-fusion", fusion), *[
        (v, choose_fusion(logits, data, split["train"], val, tifu=TUNED[name], **kw))
        for v, kw in VARIANTS.items() if v in ONLY
    ]]:
        choice = fusion_choice(f)
        print(variant, choice["description"])
        record(fused(rec, f), variant, {"choice": choice, "choose_s_untimed": round(choose_s, 1)})


def time_checkpoint(name: str, run: Path, repeats: int = 3) -> None:
    """Seconds of the fusion choice (TIFU tuning included) and of scoring the test users with
    the model alone and with the TIFU fusion (best of ``repeats``)."""
    rec = load_trained(run / "best.pt", model_only=True)
    data, _ = read_dnntsp_json(shared_dataset(name)).aligned_to(rec.item_ids)
    split = load_split(rec.checkpoint["split_spec"], data)
    t0 = time.perf_counter()
    val = split["validate"]
    logits = validation_logits(rec, data, val)
    fusion = choose_fusion(logits, data, split["train"], val)
    choose_s = time.perf_counter() - t0
    out = {"choose_s": round(choose_s, 2)}
    for variant, ranker in {"model": rec, "tifu-fusion": fused(rec, fusion)}.items():
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            ranker.score(data, split["test"])
            best = min(best, time.perf_counter() - t0)
        out[f"score_s_{variant}"] = round(best, 3)
    out["fusion_weight"] = fusion.weight
    print(name, out)
    append_result("fusion_timing", {"data": name, "run": str(run), "n_test": len(split["test"]), **out})


def run_baselines(name: str) -> None:
    data = read_dnntsp_json(shared_dataset(name))
    from basketgnn.data.split import make_split

    split = make_split(data)
    for model_name in ("tifu-knn", "p-topfreq"):
        model = make_baseline(model_name)
        metrics, _ = fit_and_evaluate(model, data, split)
        print(name, model_name, headline(metrics))
        append_result("fusion", {"data": name, "seed": None, "variant": model_name,
                                 "params": model.params(), "metrics": metrics})


def summary() -> None:
    rows = [json.loads(line) for line in (RESULTS / "fusion.jsonl").read_text().splitlines()]
    latest: dict[tuple, dict] = {}
    for r in rows:  # the last row of each (data, seed, variant)
        latest[r["data"], r["seed"], r["variant"]] = r
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for (data, _, variant), r in latest.items():
        groups[data, variant].append(r)
    for data in sorted({d for d, _ in groups}):
        print(f"\n**{data}** (test users; mean ± std over seeds)\n")
        print("| model | n | " + " | ".join(CELLS + EXTRA) + " |")
        print("|---|---|" + "---|" * len(CELLS + EXTRA))
        # "neighbours": rows recorded when the neighbour add-on existed
        for variant in ("tifu-fusion", *VARIANTS, "neighbours", "model", "tifu-knn", "p-topfreq"):
            rs = groups.get((data, variant))
            if not rs:
                continue
            cells = []
            for c in CELLS + EXTRA:
                v = np.array([r["metrics"][c] for r in rs])
                cells.append(f"{v.mean():.4f}" + (f" ± {v.std():.4f}" if len(v) > 1 else ""))
            print(f"| {variant} | {len(rs)} | " + " | ".join(cells) + " |")
        for r in sorted(groups.get((data, "tifu-fusion"), []), key=lambda r: r["seed"]):
            c = r["choice"]
            print(f"- seed {r['seed']}: {c['description']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", help="DC or TaFeng")
    ap.add_argument("--runs", type=Path, nargs="*", default=[], help="training run folders (best.pt)")
    ap.add_argument("--baselines", action="store_true", help="also tuned TIFU-KNN and P-TopFreq")
    ap.add_argument("--summary", action="store_true", help="print the tables of fusion.jsonl")
    ap.add_argument("--variants", nargs="*", default=[], help=f"also: {', '.join(VARIANTS)}")
    ap.add_argument("--time", action="store_true", help="time the choice and scoring instead")
    args = ap.parse_args()
    ONLY.update(args.variants)
    if args.time:
        for run in args.runs:
            time_checkpoint(args.data, run)
        return
    if args.summary:
        summary()
        return
    for run in args.runs:
        run_checkpoint(args.data, run)
    if args.baselines:
        run_baselines(args.data)


if __name__ == "__main__":
    main()
