"""SASRec's and BERT4Rec's options, each alone beside the model's default, fusion off: one
training run per (data, model, variant, seed) through the CLI, evaluated on the validation and
the test users (@10/@20, with the repeat / explore split).

    nice -n 10 flock -s /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_zoo_options.py \
        --data DC TaFeng --models sasrec bert4rec --variants default interests4 hierarchical objective

For every run, from the project root,

    basketgnn train --model NAME --data ../shared/datasets/dnntsp/DATA.json --out RUNS/DATA-NAME-VARIANT-sS \
        --seed S --set fusion=off --set threads=1 [--set KEY=VALUE ...] --no-progress
    basketgnn evaluate --checkpoint RUNS/.../best.pt --split validate --output RUNS/.../validate.json
    basketgnn evaluate --checkpoint RUNS/.../best.pt --split test --output RUNS/.../test.json

and appends one JSON line to benchmarks/results/zoo_options.jsonl. A run with a row already is skipped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import (
    METRIC_NAMES,
    RESULTS,
    append_result,
    cells,
    shared_dataset,
    test_cells,
    train_evaluate,
)

#: Each variant's keys (beside fusion off and one thread); "objective" is the model's paper objective.
VARIANTS = {
    "default": {},
    "interests4": {"interests": 4},
    "hierarchical": {"basket_encoder": "attention"},
    "objective": None,  # per model, below
}
OBJECTIVE = {
    "sasrec": {"objective": "sampled_bce", "train_prefixes": False},
    "bert4rec": {"objective": "softmax"},
}


def settings(model: str, variant: str) -> dict:
    return OBJECTIVE[model] if variant == "objective" else VARIANTS[variant]


def done() -> set[tuple[str, str, str, int]]:
    path = RESULTS / "zoo_options.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {(r["data"], r["model"], r["variant"], r["seed"]) for r in rows}


def one(data: str, model: str, variant: str, seed: int, runs: Path) -> dict:
    out = runs / f"{data}-{model}-{variant}-s{seed}"
    sets = {"fusion": "off", "threads": 1, **settings(model, variant)}
    return {"data": data, "model": model, "variant": variant, "seed": seed,
            **train_evaluate(out, model, shared_dataset(data), seed, sets)}


#: The default's earlier seed-0 runs in zoo.jsonl (BENCHMARKS.md section 8; fusion tifu, so their
#: model-only test metrics and the fusion's model-alone validation metrics): DC retrained with
#: item transitions, TaFeng trained to early stopping.
EARLIER_DEFAULT = {"DC": "zoo-transitions", "TaFeng": "converged"}


def earlier_defaults() -> list[dict]:
    """zoo.jsonl's seed-0 default runs as rows of this benchmark (variant "default, zoo.jsonl")."""
    out = []
    for line in (RESULTS / "zoo.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["seed"] == 0 and r["model"] in OBJECTIVE and r.get("tag") == EARLIER_DEFAULT.get(r["data"]) \
                and not r.get("variant"):
            validate = (r.get("validation") or {}).get("model_alone_metrics") or {}
            out.append({"data": r["data"], "model": r["model"], "variant": "default, zoo.jsonl",
                        "epochs_run": r["epochs_run"], "best_epoch": r["best_epoch"],
                        "validate": validate, "test": r["model_only"]["metrics"]})
    return out


def summary() -> str:
    rows = [json.loads(line) for line in (RESULTS / "zoo_options.jsonl").read_text().splitlines() if line.strip()]
    rows += earlier_defaults()
    order = [*VARIANTS, "default, zoo.jsonl"]
    out = ["| data | model | variant | epochs (best) | validation R / N / P @10 | test R / N / P @10 "
           "| test R / N / P @20 | test repeat / explore recall@10 |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["data"], r["model"], order.index(r["variant"]))):
        out.append(f"| {r['data']} | {r['model']} | {r['variant']} | {r['epochs_run']} ({r['best_epoch']}) "
                   f"| {cells(r['validate'], METRIC_NAMES[:3])} | {test_cells(r['test'])} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="*", default=["DC"])
    ap.add_argument("--models", nargs="*", default=["sasrec", "bert4rec"])
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--runs", type=Path, default=Path("/tmp/zo/runs"))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    if args.summary:
        print(summary())
        return
    finished = done()
    for data in args.data:
        for model in args.models:
            for variant in args.variants:
                for seed in args.seeds:
                    if (data, model, variant, seed) in finished:
                        continue
                    row = one(data, model, variant, seed, args.runs)
                    append_result("zoo_options", row)
                    print(data, model, variant, seed, row["test"]["recall@10"], flush=True)


if __name__ == "__main__":
    main()
