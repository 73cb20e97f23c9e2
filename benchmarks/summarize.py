"""Markdown tables from benchmarks/results/accuracy.jsonl (mean ± std over seeds per tag).

    .venv/bin/python benchmarks/summarize.py [--tags default published] [--data DC TaFeng]
    .venv/bin/python benchmarks/summarize.py --baselines     # from cli_baselines.jsonl
    .venv/bin/python benchmarks/summarize.py --ablation docs/ablation/results.jsonl --variant full
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np
from common import RESULTS

KS = (10, 20, 30, 40)
METRICS = ("recall", "ndcg", "phr")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tags", nargs="*", default=None, help="DNNTSP tags to show (default: all)")
    ap.add_argument("--data", nargs="*", default=["DC", "TaFeng"])
    ap.add_argument("--baselines", action="store_true", help="table of cli_baselines.jsonl")
    ap.add_argument("--ablation", help="an ablation results.jsonl: DNNTSP variant vs baselines")
    ap.add_argument("--variant", default="full")
    args = ap.parse_args()
    if args.baselines:
        return baselines_table(args.data)
    if args.ablation:
        return ablation_table(args.ablation, args.variant, args.data)
    rows = [json.loads(line) for line in (RESULTS / "accuracy.jsonl").read_text().splitlines()]
    for data in args.data:
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            if r["data"] != data:
                continue
            if r["model"] == "dnntsp":
                if args.tags is None or r["tag"] in args.tags:
                    groups[f"DNNTSP ({r['tag']})"].append(r)
            else:
                groups[r["model"]] = [r]  # the latest run of each baseline
        print(f"\n**{data}** (test users; mean ± std over seeds; n = runs)\n")
        print("| model | n | " + " | ".join(f"@{k} R / N / P" for k in KS) + " |")
        print("|---|---|" + "---|" * len(KS))
        for name, runs in groups.items():
            cells = _cells(runs)
            print(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")


def _cells(runs: list[dict]) -> list[str]:
    cells = []
    for k in KS:
        parts = []
        for m in METRICS:
            v = np.array([r["metrics"][f"{m}@{k}"] for r in runs])
            parts.append(f"{v.mean():.4f}" + (f" ± {v.std(ddof=1):.4f}" if len(v) > 1 else ""))
        cells.append(" / ".join(parts))
    return cells


def baselines_table(datasets: list[str]) -> None:
    rows = [json.loads(line) for line in (RESULTS / "cli_baselines.jsonl").read_text().splitlines()]
    latest = {(r["data"], r["model"]): r for r in rows}
    print("| data | model | " + " | ".join(f"@{k} R / N / P" for k in KS) + " | prepare s | evaluate s |")
    print("|---|---|" + "---|" * len(KS) + "---|---|")
    for (data, model), r in latest.items():
        if data in datasets:
            print(f"| {data} | {model} | " + " | ".join(_cells([r])) + f" | {r['prepare_wall_s']} | {r['evaluate_wall_s']} |")


def ablation_table(path: str, variant: str, datasets: list[str]) -> None:
    rows = [json.loads(line) for line in open(path).read().splitlines() if line.strip()]
    for data in datasets:
        runs = [r for r in rows if r["dataset"] == data and r["variant"] == variant]
        base = {r["variant"]: r for r in rows if r["dataset"] == data and r["kind"] == "baseline"}
        if not runs:
            continue
        print(f"\n**{data}** (test users; DNNTSP mean ± std over {len(runs)} seeds)\n")
        print("| model | " + " | ".join(f"@{k} R / N / P" for k in KS) + " |")
        print("|---|" + "---|" * len(KS))
        print(f"| DNNTSP ({variant}) | " + " | ".join(_cells(runs)) + " |")
        for name, r in base.items():
            print(f"| {name} | " + " | ".join(_cells([r])) + " |")
        t = [r["timing_s"]["fit"] if "timing_s" in r else r["train_s"] for r in runs]
        e = [f"{r['best_epoch']}/{r['epochs_run']}" for r in runs]
        print(f"\ntrain seconds per seed: {t}; best/run epochs: {e}")


if __name__ == "__main__":
    main()
