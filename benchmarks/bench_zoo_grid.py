"""Every neural model tuned alike: the same budget of six configurations for SASRec, BERT4Rec,
DIN and DNNTSP on each data set, fusion off (each model alone), chosen on the validation users.

    .venv/bin/python benchmarks/bench_zoo_grid.py --data DC TaFeng --worker 0/2 &
    .venv/bin/python benchmarks/bench_zoo_grid.py --data DC TaFeng --worker 1/2 &
    .venv/bin/python benchmarks/bench_zoo_grid.py --data realistic=/work/serve-real/data --worker 0/2 &
    .venv/bin/python benchmarks/bench_zoo_grid.py --summary

A ``--data`` entry is a published split's name (``../shared/datasets``) or ``NAME=PATH``: a
prepared folder or a DNNTSP JSON file, its rows labelled NAME.

Each model's grid is three learning rates by two values of its regulariser (:data:`GRID`): the
model's default and the paper's value of each, and one more value beside them. Every run is
``basketgnn train --model NAME --data DATA --seed 0 --set fusion=off --set threads=1
--set lr=.. --set KEY=..`` with the model's own epoch cap and early stopping, then
``basketgnn evaluate`` on the validation and the test users; one JSON line per run is appended
to benchmarks/results/zoo_grid.jsonl (a run with a row is skipped). ``--worker i/n`` takes every
n-th run, so that two one-thread runners share the 2 cores.

``--summary`` prints, per data set and model, the configuration with the best validation
criterion (the mean validation NDCG the epoch choice uses; the test figures are not read to
choose), its test row and the default configuration's test row.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from common import RESULTS, append_result, shared_dataset, test_cells, train_evaluate

#: Per model: (learning rates, (regulariser key, values)); the first value of each is the
#: model's default. The papers' values: SASRec lr 1e-3, dropout 0.5 (its sparse sets); BERT4Rec
#: lr 1e-4, dropout 0.1; DNNTSP lr 1e-3, no dropout; DIN embedding size 12.
GRID = {
    "sasrec": ([3e-3, 1e-3, 1e-2], ("dropout", [0.2, 0.5])),
    "bert4rec": ([3e-3, 1e-3, 1e-4], ("dropout", [0.1, 0.2])),
    "din": ([3e-3, 1e-3, 1e-2], ("dim", [32, 12])),
    "dnntsp": ([1e-3, 3e-3, 1e-2], ("dropout", [0.2, 0.0])),
}


def configs(model: str) -> list[dict]:
    """The model's six configurations, its default first."""
    lrs, (key, values) = GRID[model]
    return [{"lr": lr, key: v} for v, lr in itertools.product(values, lrs)]


def name(sets: dict) -> str:
    return "-".join(f"{k}{v:g}" for k, v in sets.items())


def dataset(entry: str) -> tuple[str, Path]:
    """(label, path) of a ``--data`` entry: ``NAME=PATH``, or a published split's name."""
    label, _, path = entry.partition("=")
    return (label, Path(path)) if path else (entry, shared_dataset(entry))


def rows() -> list[dict]:
    path = RESULTS / "zoo_grid.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def summary() -> str:
    out = ["| data | model | configuration | runs | validation mean NDCG | epochs (best) | test R / N / P @10 "
           "| test R / N / P @20 | test repeat / explore recall@10 |", "|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows():
        by.setdefault((r["data"], r["model"]), []).append(r)
    for (data, model), runs in sorted(by.items()):
        default = name(configs(model)[0])
        best = max(runs, key=lambda r: r["val_mean_ndcg"])
        shown = [("chosen: " + r["config"], r) for r in [best]]
        shown += [("default: " + r["config"], r) for r in runs if r["config"] == default and r is not best]
        for label, r in shown:
            out.append(f"| {data} | {model} | {label} | {len(runs)} | {r['val_mean_ndcg']:.4f} "
                       f"| {r['epochs_run']} ({r['best_epoch']}) | {test_cells(r['test'])} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="*", default=["DC"])
    ap.add_argument("--models", nargs="*", default=list(GRID))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", default="0/1", help="i/n: run every n-th configuration, starting at i")
    ap.add_argument("--runs", type=Path, default=Path("/tmp/zoo-grid"))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    if args.summary:
        print(summary())
        return
    i, n = (int(x) for x in args.worker.split("/"))
    finished = {(r["data"], r["model"], r["config"], r["seed"]) for r in rows()}
    todo = [(*dataset(d), m, c) for d in args.data for m in args.models for c in configs(m)]
    for d, path, m, sets in todo[i::n]:
        if (d, m, name(sets), args.seed) in finished:
            continue
        out = args.runs / f"{d}-{m}-{name(sets)}-s{args.seed}"
        row = train_evaluate(out, m, path, args.seed, {"fusion": "off", "threads": 1, **sets})
        append_result("zoo_grid", {"data": d, "model": m, "config": name(sets), "seed": args.seed, **row})
        print(d, m, name(sets), row["val_mean_ndcg"], row["test"]["recall@10"], flush=True)


if __name__ == "__main__":
    main()
