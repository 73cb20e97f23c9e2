"""Markdown tables from benchmarks/results/accuracy.jsonl (mean ± std over seeds per tag).

    .venv/bin/python benchmarks/summarize.py [--tags default published] [--data DC TaFeng]
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
    args = ap.parse_args()
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
            cells = []
            for k in KS:
                parts = []
                for m in METRICS:
                    v = np.array([r["metrics"][f"{m}@{k}"] for r in runs])
                    parts.append(f"{v.mean():.4f}" + (f"±{v.std(ddof=1):.4f}" if len(v) > 1 else ""))
                cells.append(" / ".join(parts))
            print(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
