"""Accuracy on the published DNNTSP splits: DNNTSP over several seeds, and the baselines.

    .venv/bin/python benchmarks/bench_accuracy.py --data DC --seeds 0 1 2 [--set lr=0.003 ...] [--tag NAME]
    .venv/bin/python benchmarks/bench_accuracy.py --data TaFeng --baselines

A trained model is fitted as `basketgnn train` fits it (``workflow.train``: the engine, then the
fusion with TIFU-KNN chosen on the validation customers) and evaluated on the test customers as
it ranks after that choice. Each run appends one JSON line (model, tag, config, seed, data, all
test metrics, best epoch, train time including the fusion choice, the fusion's choice) to
benchmarks/results/accuracy.jsonl; `summarize.py` turns those lines into tables.
"""

from __future__ import annotations

import argparse

import yaml
from common import append_result, peak_rss_mb, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.registry import make_baseline, names
from basketgnn.workflow.config import load_config
from basketgnn.workflow.harness import evaluate_model, fit_and_evaluate
from basketgnn.workflow.training import ModelEntry, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="DC or TaFeng")
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--set", nargs="*", default=[], help="config overrides key=value (YAML values)")
    ap.add_argument("--tag", default="default")
    ap.add_argument("--model", default="dnntsp", help="registry name of the trained model")
    ap.add_argument("--baselines", action="store_true", help="evaluate the baselines instead")
    args = ap.parse_args()

    path = shared_dataset(args.data)
    data = read_dnntsp_json(path)
    split = make_split(data)
    if args.baselines:
        for name in names("baseline"):
            model = make_baseline(name)
            metrics, timing = fit_and_evaluate(model, data, split)
            row = {"model": name, "tag": "baseline", "params": model.params(), "data": args.data,
                   "split": split.name, "metrics": metrics, "fit_s": round(timing["fit"], 2),
                   "score_s": round(timing["score"], 3)}
            print(name, {k: round(v, 4) for k, v in metrics.items() if k.endswith(("@10", "@20")) and "_" not in k})
            append_result("accuracy", row)
        return

    overrides = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    for seed in args.seeds:
        settings = load_config(None, model=args.model, **{**overrides, "seed": seed})
        outcome = train(ModelEntry(args.model, settings), data, split)  # the engine, then the fusion choice
        metrics, score_s = evaluate_model(outcome.recommender, data, split["test"])
        train_s, result, choice = outcome.fit_s, outcome.training, outcome.fusion
        assert result is not None
        row = {"model": args.model, "tag": args.tag, "config": settings.dump(), "seed": seed,
               "data": args.data, "split": split.name, "metrics": metrics,
               "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
               "train_s": round(train_s, 1), "score_s": round(score_s, 3),
               "best_validation_mean_ndcg": round(result.best_validation["mean_ndcg"], 5),
               "fusion": choice, "peak_rss_mb": round(peak_rss_mb())}
        print(args.tag, seed, f"best {result.best_epoch}/{result.epochs_run}", f"{train_s:.0f}s",
              choice["description"] if choice is not None else "fusion off",
              {k: round(v, 4) for k, v in metrics.items() if k.endswith(("@10", "@20")) and "_" not in k},
              flush=True)
        append_result("accuracy", row)


if __name__ == "__main__":
    main()
