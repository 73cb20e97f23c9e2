"""The re-ranking stage (``rerank: true``) learned over trained checkpoints, read on validation and test.

    .venv/bin/python benchmarks/bench_rerank.py --data DATA --runs RUN [RUN ...] --label LABEL \
        [--seeds 0 1 2] [--split auto] [--pairs T]
    .venv/bin/python benchmarks/bench_rerank.py --data DATA --runs RUN --time ROUNDS   # speed

Each RUN is a ``basketgnn train`` folder (its best.pt with the fusion chosen on validation). For
every run and stage seed, the stage is learned over what the checkpoint's fusion ships (the
fused model; a stage that ``train`` stored is set aside)
exactly as ``train`` does with ``rerank: true`` (:func:`basketgnn.recommenders.reranked.choose`,
TIFU-KNN's parameters as the fusion tuned them), and the shipped model, the stage's order (kept
or not) and the product's choice (the stage where validation kept it, else the shipped model) are
evaluated on the validation and the test customers. Nothing retrains the network. ``--pairs``:
the item pairs kept per item (``rerank_pairs``; 0: the stage without the pair columns). One
JSON line per (run, seed) goes to ``benchmarks/results/rerank.jsonl``; ``--table`` prints the
means. ``--time`` ranks with the shipped model, the stage and the stage without pair columns in
turn.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from common import RESULTS, append_result

from basketgnn.data.ingest import load_data
from basketgnn.data.split import make_split
from basketgnn.recommenders import reranked
from basketgnn.recommenders.base import rank_items
from basketgnn.scoring.item_pairs import TOP
from basketgnn.scoring.tifu import TifuParams
from basketgnn.workflow.harness import evaluate_model
from basketgnn.workflow.training import load_trained

SHOWN = ("recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20", "phr@20")


def loaded(data_path: str, split_spec: str, run_dir: Path):
    """The data, its split, what the run's checkpoint ships, and TIFU-KNN's parameters as its
    fusion tuned them (a checkpoint chosen before the record held them: its fusion's)."""
    data = load_data(data_path)
    shipped = load_trained(run_dir / "best.pt")
    shipped = getattr(shipped, "shipped", shipped)  # what the fusion ships: the stage is learned here
    choice = getattr(shipped, "base", shipped).fusion_choice or {}
    return data, make_split(data, split_spec), shipped, TifuParams(**(choice.get("tuned_tifu") or choice["tifu"]))


def run(data_path: str, split_spec: str, run_dir: Path, seed: int, label: str, pairs: int = TOP) -> dict:
    data, sp, shipped, tifu = loaded(data_path, split_spec, run_dir)
    t0 = time.perf_counter()
    stage, record = reranked.learn(shipped, data, sp["train"], sp["validate"], tifu, seed=seed, pairs=pairs)
    learn_s = time.perf_counter() - t0
    forced = reranked.RerankedRecommender(shipped, stage)  # its order, kept or not
    row = {"label": label, "data": data_path, "run": str(run_dir), "seed": seed, "pairs": pairs, "learn_s": round(learn_s, 1),
           "choice": {k: v for k, v in record.items() if k != "description"}, "description": record["description"]}
    for part in ("validate", "test"):
        for name, rec in (("shipped", shipped), ("stage", forced)):
            metrics, score_s = evaluate_model(rec, data, sp[part])
            row[f"{part}_{name}"] = {k: round(float(metrics[k]), 6) for k in SHOWN}
            row[f"{part}_{name}_score_s"] = round(score_s, 2)
        row[f"{part}_product"] = row[f"{part}_stage"] if record["kept"] else row[f"{part}_shipped"]
    return row


def timing(data_path: str, split_spec: str, run_dir: Path, rounds: int, label: str, pairs: int = TOP) -> dict:
    """Seconds to rank every test customer's top 20 with the shipped model, the stage with
    pair columns and the stage without them (learned here, used whether or not validation
    keeps the stage or its pairs), in turn (reversed every other round), after one warm-up
    call of each; the median and every round."""
    data, sp, shipped, tifu = loaded(data_path, split_spec, run_dir)
    ways = {"shipped": shipped}
    for name, top in (("stage", pairs), ("stage_no_pairs", 0)):
        stage, _ = reranked.learn(shipped, data, sp["train"], sp["validate"], tifu, pairs=top, choose_pairs=False)
        ways[name] = reranked.RerankedRecommender(shipped, stage)
    inst = sp["test"]
    times: dict[str, list[float]] = {name: [] for name in ways}
    for rec in ways.values():
        rank_items(rec, data, inst, 20)  # warm-up: compiled kernels, caches
    for r in range(rounds):
        for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            t0 = time.perf_counter()
            rank_items(ways[name], data, inst, 20)
            times[name].append(round(time.perf_counter() - t0, 3))
    row = {"label": label, "kind": "timing", "data": data_path, "run": str(run_dir), "customers": len(inst), "pairs": pairs,
           "threads": torch.get_num_threads(), "rounds": times,
           "median_s": {k: statistics.median(v) for k, v in times.items()},
           "customers_per_s": {k: round(len(inst) / statistics.median(v)) for k, v in times.items()}}  # fmt: skip
    return row


def table() -> None:
    rows = [json.loads(x) for x in (RESULTS / "rerank.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("kind") != "timing"]
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["label"],), []).append(r)
    print("| label | n | part | shipped R@10 / N@10 / P@10 | stage | product | kept |")
    print("|---|---|---|---|---|---|---|")
    for (label,), rs in groups.items():
        for part in ("validate", "test"):
            cells = []
            for name in ("shipped", "stage", "product"):
                cells.append(" / ".join(f"{statistics.mean(r[f'{part}_{name}'][m] for r in rs):.4f}"
                                        for m in ("recall@10", "ndcg@10", "phr@10")))
            kept = sum(r["choice"]["kept"] for r in rs)
            print(f"| {label} | {len(rs)} | {part} | {cells[0]} | {cells[1]} | {cells[2]} | {kept} of {len(rs)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--runs", nargs="+", type=Path, default=[])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--split", default="auto")
    ap.add_argument("--label", default="rerank")
    ap.add_argument("--pairs", type=int, default=TOP, help=f"item pairs kept per item (default {TOP}; 0: none)")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--time", type=int, metavar="ROUNDS", help="time the ranking instead (quiet machine)")
    args = ap.parse_args()
    if args.table:
        table()
        return
    if args.time:
        for run_dir in args.runs:
            row = timing(args.data, args.split, run_dir, args.time, args.label, args.pairs)
            append_result("rerank", row)
            print(json.dumps(row))
        return
    for run_dir in args.runs:
        for seed in args.seeds:
            row = run(args.data, args.split, run_dir, seed, args.label, args.pairs)
            append_result("rerank", row)
            print(row["description"], file=sys.stderr)
            print(json.dumps({k: row[k] for k in ("run", "seed", "validate_shipped", "validate_stage",
                                                  "test_shipped", "test_stage")}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
