"""A warm-started and a from-scratch nightly model on the same held-out customers.

    .venv/bin/python benchmarks/bench_warm_vs_scratch.py --run-dir /tmp/scale/run-d100k \\
        --warm RUN/stages/fit_dnntsp-*/best.pt --scratch OTHER/stages/fit_dnntsp-*/best.pt \\
        --label default-100k

Both checkpoints were trained by the pipeline on the same sample of customers (same log,
``train.sample_customers`` and seed). Each is evaluated, the network alone (no fusion, so a
checkpoint whose fusion choice did not finish compares too) and fused with TIFU-KNN when its
validation chose a fusion, on the customers of ``evaluate.customers`` / ``evaluate.held_out`` of the run's job (those
outside the training sample). Rows go to benchmarks/results/warm_vs_scratch.jsonl.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml
from common import append_result

from basketgnn.data.dataset import BasketData
from basketgnn.data.sample import sampled_customers
from basketgnn.data.split import load_split
from basketgnn.pipeline.run import EVALUATED_PART, EvaluateSpec, evaluation_split
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.workflow.harness import evaluate_model
from basketgnn.workflow.training import load_trained

CELLS = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", required=True, help="the warm run's run_dir (its job YAML beside it)")
    ap.add_argument("--warm", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    run_dir = Path(args.run_dir)
    job = yaml.safe_load(run_dir.with_name(run_dir.name + ".yaml").read_text())
    stages = run_dir / "stages"
    data = BasketData.load(max(stages.glob("prepare-*"), key=lambda p: p.stat().st_mtime) / "data")
    split_file = max(stages.glob("split-*/split.json"), key=lambda p: p.stat().st_mtime)
    sp = load_split(split_file, data)
    train = job["train"]
    trained_on = sampled_customers(data.user_ids, train["sample_customers"], train.get("sample_seed", 0))
    held = evaluation_split(sp, EvaluateSpec(**job.get("evaluate", {})), trained_on)[EVALUATED_PART]
    record = {"label": args.label, "run_dir": str(run_dir), "held_out_customers": len(held)}
    for name, path in (("warm", args.warm), ("scratch", args.scratch)):
        rec = load_trained(path)  # fused when its validation chose a fusion, re-ranked where kept
        fused = getattr(rec, "shipped", rec)  # what the fusion ships, under the re-ranking stage
        model = fused.base if isinstance(fused, FusedRecommender) else fused
        alone, _ = evaluate_model(model, data, held)
        record[f"{name}_model_alone"] = {c: round(alone[c], 4) for c in CELLS}
        if isinstance(fused, FusedRecommender):
            metrics, _ = evaluate_model(fused, data, held)
            record[f"{name}_fused"] = {c: round(metrics[c], 4) for c in CELLS}
        if rec is not fused:
            metrics, _ = evaluate_model(rec, data, held)
            record[f"{name}_reranked"] = {c: round(metrics[c], 4) for c in CELLS}
        record[f"{name}_checkpoint"] = str(path)
        print(json.dumps(record), flush=True)
    append_result("warm_vs_scratch", record)


if __name__ == "__main__":
    main()
