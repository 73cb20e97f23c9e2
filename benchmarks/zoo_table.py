"""The README's model tables, from the rows of bench_zoo_cli.py (zoo.jsonl) and
bench_cli_baselines.py (cli_baselines.jsonl): each model alone first (fusion off, the fair
comparison), then each neural model as trained (fused with TIFU-KNN and the item transitions as
validation chose), mean ± std over seeds, with the repeat / explore split of recall@10.

    .venv/bin/python benchmarks/zoo_table.py --tag table [--data DC TaFeng realistic] \
        [--source DC:sasrec:zoo-transitions ...]

``--source DATA:MODEL:TAG[:VARIANT]`` takes that data set's and model's rows from another tag
(and config variant) than ``--tag``: earlier runs of the same default.

Repeat recall@10 is the recall@10 of the target items the customer bought before, explore
recall@10 that of the items new to the customer (``basketgnn.metrics``).
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import RESULTS

BASELINES = ["g-topfreq", "p-topfreq", "tifu-knn", "up-cf"]
NEURAL = ["dnntsp", "sasrec", "bert4rec", "din"]
CELLS = [(k, name) for k in (10, 20) for name in ("recall", "ndcg", "phr")]


def read(name: str) -> list[dict]:
    path = RESULTS / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cell(values: list[float]) -> str:
    """``.1234±.0012`` over seeds (``.1234`` for one run), leading zero dropped."""
    def f(x: float) -> str:
        return f"{x:.4f}".lstrip("0")
    if len(values) == 1:
        return f(values[0])
    return f"{f(statistics.mean(values))}±{f(statistics.stdev(values))}"


def metric_cells(metrics: list[dict]) -> list[str]:
    at = [" / ".join(cell([m[f"{name}@{k}"] for m in metrics]) for k2, name in CELLS if k2 == k)
          for k in (10, 20)]
    split = [cell([m[f"{part}_recall@10"] for m in metrics]) for part in ("repeat", "explore")]
    return at + split


def fusion_label(row: dict) -> str:
    used = row["as_trained"]["params"].get("fusion_used") or {}
    return f"{used.get('weight', 0):g} / {used.get('transition', 0):g}"


def pick(rows: list[dict], data: str, model: str, tag: str, sources: dict) -> list[dict]:
    """The rows of (data, model): from its ``--source`` tag and variant, else from ``tag``."""
    want_tag, variant = sources.get((data, model), (tag, None))
    return sorted((r for r in rows if r["data"] == data and r["model"] == model
                   and r.get("tag") == want_tag and r.get("variant") == variant),
                  key=lambda r: r["seed"])


def table(data: str, zoo: list[dict], baselines: list[dict], tag: str, sources: dict) -> str:
    head = ("| model | seeds | @10 R / N / P | @20 R / N / P | repeat R@10 | explore R@10 "
            "| train s |\n|---|---|---|---|---|---|---|")
    lines = [f"**{data}**, each model alone (fusion off)\n", head]
    for model in BASELINES:
        runs = [r for r in baselines if r["data"] == data and r["model"] == model][-1:]
        if runs:
            label = f"{model}, tuned" if model in ("tifu-knn", "up-cf") else model
            lines.append(f"| {label} | - | " + " | ".join(metric_cells([runs[0]["metrics"]])) + " | |")
    fused = []
    for model in NEURAL:
        runs = pick(zoo, data, model, tag, sources)
        if not runs:
            continue
        seeds = ", ".join(str(r["seed"]) for r in runs)
        wall = statistics.median(r["train_wall_s"] for r in runs)
        alone = metric_cells([r["model_only"]["metrics"] for r in runs])
        lines.append(f"| {model} alone | {seeds} | " + " | ".join(alone) + f" | {wall:.0f} |")
        trained = metric_cells([r["as_trained"]["metrics"] for r in runs])
        weights = ", ".join(fusion_label(r) for r in runs)
        fused.append(f"| {model} as trained (λ / ν = {weights}) | {seeds} | "
                     + " | ".join(trained) + f" | {wall:.0f} |")
    lines += ["", f"**{data}**, as trained (fused with TIFU-KNN and the item transitions where "
              "validation chose them; λ = 1, ν = 0 is TIFU-KNN alone)\n", head, *fused, ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="table", help="the zoo.jsonl rows' tag")
    ap.add_argument("--data", nargs="*", default=["DC", "TaFeng", "realistic"])
    ap.add_argument("--source", nargs="*", default=[], metavar="DATA:MODEL:TAG[:VARIANT]")
    args = ap.parse_args()
    sources = {}
    for spec in args.source:
        data, model, tag, *variant = spec.split(":")
        sources[(data, model)] = (tag, variant[0] if variant else None)
    zoo, baselines = read("zoo"), read("cli_baselines")
    for data in args.data:
        print(table(data, zoo, baselines, args.tag, sources))


if __name__ == "__main__":
    main()
