"""Does the fusion's choice cost hit rate? Validation users only: for each run of
bench_zoo_cli.py, the fusion grid that `train` evaluated on the validation customers (kept in
best.pt), the point it shipped, and the eligible point (the floor rule: every one of recall,
NDCG and PHR at 10 and 20 at least TIFU-KNN alone's) with the best PHR@10.

    .venv/bin/python benchmarks/phr_check.py --tag table --model dnntsp

Prints one line per run and the mean over runs per data set: validation recall@10 and PHR@10 of
the shipped point, of the best-PHR@10 eligible point and of the two parts alone, and how many
eligible points there were. The test metrics are not read.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from common import RESULTS

METRICS = [f"{name}@{k}" for k in (10, 20) for name in ("recall", "ndcg", "phr")]


def near(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) < 1e-9


def grid_of(best_pt: Path) -> tuple[dict, list[dict]]:
    state = torch.load(best_pt, map_location="cpu", weights_only=False)
    choice = ((state.get("sections") or {}).get("fusion") or {}).get("choice") or {}
    return choice, choice.get("grid") or []


def check(run_dir: Path) -> dict:
    choice, grid = grid_of(run_dir / "best.pt")
    nu, option = choice.get("transition") or 0.0, choice.get("transition_option")

    def plain(g: dict) -> bool:
        return near(g.get("transition") or 0.0, 0.0)

    tifu = next(g for g in grid if near(g["weight"], 1.0) and plain(g))
    alone = next(g for g in grid if near(g["weight"], 0.0) and plain(g))
    shipped = next(
        g for g in grid
        if near(g["weight"], choice["weight"]) and near(g.get("transition") or 0.0, nu)
        and g.get("transition_option") == option
        and (near(g["weight"], 0.0) or near(g.get("alpha"), choice["tifu"]["alpha"]))
    )
    eligible = [g for g in grid if all(g["metrics"][m] >= tifu["metrics"][m] - 1e-12 for m in METRICS)]
    best_phr = max(eligible, key=lambda g: (g["metrics"]["phr@10"], g["validation_criterion"]))

    def brief(g: dict) -> dict:
        return {"weight": g["weight"], "transition": g.get("transition") or 0.0,
                "recall@10": g["metrics"]["recall@10"], "phr@10": g["metrics"]["phr@10"],
                "criterion": g["validation_criterion"]}

    return {"shipped": brief(shipped), "best_phr_eligible": brief(best_phr), "tifu_alone": brief(tifu),
            "model_alone": brief(alone), "eligible": len(eligible), "points": len(grid)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="table")
    ap.add_argument("--model", default="dnntsp")
    args = ap.parse_args()
    rows = [json.loads(line) for line in (RESULTS / "zoo.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("tag") == args.tag and r["model"] == args.model and r.get("variant") is None]
    by_data: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["data"], r["seed"])):
        c = check(Path(r["run_dir"]))
        by_data.setdefault(r["data"], []).append(c)
        s, b = c["shipped"], c["best_phr_eligible"]
        print(f"{r['data']} seed {r['seed']}: shipped λ={s['weight']:g} ν={s['transition']:g} "
              f"R@10 {s['recall@10']:.4f} PHR@10 {s['phr@10']:.4f} | best-PHR eligible λ={b['weight']:g} "
              f"ν={b['transition']:g} R@10 {b['recall@10']:.4f} PHR@10 {b['phr@10']:.4f} | "
              f"TIFU alone PHR@10 {c['tifu_alone']['phr@10']:.4f}, model alone {c['model_alone']['phr@10']:.4f} "
              f"| {c['eligible']} of {c['points']} eligible")
    for data, cs in by_data.items():
        def mean(part: str, key: str, cs: list[dict] = cs) -> float:
            return statistics.mean(c[part][key] for c in cs)
        print(f"{data} mean over {len(cs)}: shipped R@10 {mean('shipped', 'recall@10'):.4f} "
              f"PHR@10 {mean('shipped', 'phr@10'):.4f}; best-PHR eligible R@10 "
              f"{mean('best_phr_eligible', 'recall@10'):.4f} PHR@10 {mean('best_phr_eligible', 'phr@10'):.4f}; "
              f"TIFU alone PHR@10 {mean('tifu_alone', 'phr@10'):.4f}; model alone {mean('model_alone', 'phr@10'):.4f}")


if __name__ == "__main__":
    main()
