"""SASRec, BERT4Rec and DIN through the CLI as a user runs them: train, then evaluate the
checkpoint as trained (fused with TIFU-KNN by default, `fusion: tifu`) and with --model-only.

    nice -n 19 .venv/bin/python benchmarks/bench_zoo_cli.py --data DC --models sasrec bert4rec --seeds 0 1 2

For every (data, model, seed) it runs, from the project root,

    basketgnn train --model NAME --data ../shared/datasets/dnntsp/DATA.json --out runs/zoo/DATA-NAME-sS \
        --seed S --config runs/zoo/threads1.yaml --no-progress [--epochs CAP]
    basketgnn evaluate --checkpoint runs/zoo/DATA-NAME-sS/best.pt --output .../fused.json
    basketgnn evaluate --checkpoint runs/zoo/DATA-NAME-sS/best.pt --model-only --output .../model.json

and appends one JSON line to benchmarks/results/zoo.jsonl (tag "cli"): both test results, the
epochs run and the best one, the median epoch time of train_log.jsonl (niced, beside other jobs:
not a clean speed figure), the train command's wall and CPU seconds, the load average before
and after. A run with a row already is skipped; a killed run resumes (the engine's resume.pt).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import PROJECT, RESULTS, append_result, shared_dataset

BIN = [sys.executable, "-m", "basketgnn"]


def done(tag: str) -> set[tuple[str, str, int, int | None, str | None]]:
    path = RESULTS / "zoo.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {(r["data"], r["model"], r["seed"], r.get("epochs_cap"), r.get("variant")) for r in rows if r.get("tag") == tag}


def data_path(data: str) -> Path:
    """A published split by name (DC, TaFeng), or a prepared dataset folder (``--data /tmp/real/data``)."""
    return Path(data) if Path(data).is_dir() else shared_dataset(data)


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as f:
        subprocess.run(cmd, cwd=PROJECT, stdout=f, stderr=subprocess.STDOUT, check=True)


def validation_choice(best_pt: Path) -> dict:
    """The validation criterion (mean of recall, NDCG, PHR @10/@20) of the ranking the run
    ships (the fusion's chosen grid point) and of the model alone, from best.pt's fusion
    choice (its "fusion" section; older formats kept it in the extras); {} without one."""
    import torch

    state = torch.load(best_pt, map_location="cpu", weights_only=False)
    section = (state.get("sections") or {}).get("fusion") or {}
    choice = (section.get("choice") or (state.get("extras") or {}).get("addon_choice")
              or state.get("addon_choice") or {})
    grid = choice.get("grid") or []
    weight, alpha = choice.get("weight"), (choice.get("tifu") or {}).get("alpha")

    def near(a, b) -> bool:  # grid weights are sums of floats (0.30000000000000004)
        return a is not None and b is not None and abs(a - b) < 1e-9

    nu, option = choice.get("transition") or 0.0, choice.get("transition_option")  # item transitions

    chosen = next((g for g in grid if near(g["weight"], weight) and (near(weight, 0) or near(g.get("alpha"), alpha))
                   and near(g.get("transition") or 0.0, nu) and g.get("transition_option") == option), None)
    alone = next((g for g in grid if near(g["weight"], 0)), None)
    shipped = None if chosen is None else chosen["validation_criterion"]
    if shipped is None and weight is not None:  # the ends, from the choice's own record
        shipped = choice.get("tifu_alone") if near(weight, 1) else choice.get("model_alone") if near(weight, 0) else None
    return {
        "shipped": shipped,
        "grid_best": choice.get("validation_criterion"),
        "shipped_metrics": None if chosen is None else chosen.get("metrics"),
        "model_alone": choice.get("model_alone", None if alone is None else alone["validation_criterion"]),
        "model_alone_metrics": None if alone is None else alone.get("metrics"),
        "tifu_alone": choice.get("tifu_alone"),
        "weight": weight,
        "transition": nu,
        "transition_option": option,
    }


def one(data: str, model: str, seed: int, cap: int | None, config: Path, runs: Path, tag: str,
        variant: str | None = None) -> dict:
    path, data = data_path(data), Path(data).name  # a folder's rows and runs are named by its last part
    name = model if variant is None else f"{model}-{variant}"
    out = runs / f"{data}-{name}-s{seed}"  # a rerun with another cap resumes here (epochs is not a training setting)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    cpu0, t0 = cpu_children(), time.perf_counter()
    cmd = [*BIN, "train", "--model", model, "--data", str(path), "--out", str(out),
           "--seed", str(seed), "--config", str(config), "--no-progress"]
    run(cmd + (["--epochs", str(cap)] if cap is not None else []), out / "train.out")
    wall, cpu = time.perf_counter() - t0, cpu_children() - cpu0
    load_after = os.getloadavg()
    results = {}
    for kind, extra in (("as_trained", []), ("model_only", ["--model-only"])):
        path = out / f"{kind}.json"
        run([*BIN, "evaluate", "--checkpoint", str(out / "best.pt"), "--output", str(path), *extra], out / "evaluate.out")
        results[kind] = json.loads(path.read_text())
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    best = max(log, key=lambda r: r["val_mean_ndcg"])
    return {
        "model": model, "tag": tag, "data": data, "seed": seed, "epochs_cap": cap, "variant": variant,
        "config": config.read_text(), "validation": validation_choice(out / "best.pt"),
        "epochs_run": len(log), "best_epoch": best["epoch"], "val_mean_ndcg": best["val_mean_ndcg"],
        "epoch_train_s_median": round(statistics.median(r["train_s"] for r in log), 2),
        "epoch_validate_s_median": round(statistics.median(r["validate_s"] for r in log), 2),
        "train_wall_s": round(wall, 1), "train_cpu_s": round(cpu, 1),
        "epochs_wall_s": round(sum(r["train_s"] + r["validate_s"] for r in log), 1),
        "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in load_after],
        "as_trained": results["as_trained"], "model_only": results["model_only"], "run_dir": str(out),
    }


def rows(tag: str) -> list[dict]:
    path = RESULTS / "zoo.jsonl"
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("tag") == tag]


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def fusion_weight(row: dict) -> float | None:
    """The TIFU-KNN weight λ that validation chose for the run (1 = TIFU-KNN alone)."""
    return (row["as_trained"]["params"].get("fusion_used") or {}).get("weight")


def summary(tag: str) -> str:
    """Markdown tables of zoo.jsonl's rows: mean ± std over seeds, per data set and model."""
    out = []
    table = rows(tag)
    for data in sorted({r["data"] for r in table}):
        out.append(f"**{data}** (test users; mean ± std over the seeds)\n")
        out.append("| model | seeds | epochs cap | R@10 | N@10 | P@10 | R@20 | N@20 | P@20 "
                   "| epochs run (best) / λ | train wall s |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for model in ("dnntsp", "sasrec", "bert4rec", "din"):
            mine = [r for r in table if r["data"] == data and r["model"] == model]
            groups = sorted({(r["epochs_cap"] or 0, r.get("variant") or "") for r in mine}, key=lambda g: (-g[0], g[1]))
            for cap, variant in groups:  # one row group per cap and variant
                runs = sorted((r for r in mine if ((r["epochs_cap"] or 0), r.get("variant") or "") == (cap, variant)),
                              key=lambda r: r["seed"])
                seeds = ", ".join(str(r["seed"]) for r in runs)
                epochs = ", ".join(f"{r['epochs_run']} ({r['best_epoch']})" for r in runs)
                wall = ", ".join(f"{r['epochs_wall_s']:.0f}" for r in runs)
                weights = ", ".join(str(fusion_weight(r)) for r in runs)
                for kind in ("as_trained", "model_only"):
                    metrics = [r[kind]["metrics"] for r in runs]
                    cells = [mean_std([m[f"{name}@{k}"] for m in metrics]) for k in (10, 20) for name in ("recall", "ndcg", "phr")]
                    extra = [epochs, wall] if kind == "as_trained" else [f"λ = {weights}", ""]
                    label = model if not variant else f"{model} {variant}"
                    out.append(f"| {label}, {kind.replace('_', ' ')} | {seeds} | {cap or '-'} | " + " | ".join(cells)
                               + " | " + " | ".join(extra) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="*", default=["DC"], help="DC and/or TaFeng, or prepared dataset folders")
    ap.add_argument("--models", nargs="*", default=["sasrec", "bert4rec", "din"])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=None, help="cap on epochs (--epochs of train), recorded")
    ap.add_argument("--runs", type=Path, default=PROJECT / "runs" / "zoo")
    ap.add_argument("--tag", default="cli")
    ap.add_argument("--summary", action="store_true", help="print the tables of zoo.jsonl's rows and exit")
    ap.add_argument("--variant", default=None, help="name of a config variant (rows, run folders and its YAML)")
    ap.add_argument("--set", action="append", default=[], help="key=value of the variant's config (YAML)")
    args = ap.parse_args()
    if args.summary:
        print(summary(args.tag))
        return
    args.runs.mkdir(parents=True, exist_ok=True)
    config = args.runs / ("threads1.yaml" if args.variant is None else f"{args.variant}.yaml")
    config.write_text("threads: 1\n" + "".join(f"{kv.replace('=', ': ', 1)}\n" for kv in args.set))  # one thread: §8
    for data in args.data:
        for model in args.models:
            for seed in args.seeds:
                if (Path(data).name, model, seed, args.epochs, args.variant) in done(args.tag):  # read again: runners run side by side
                    print(f"skip {data} {model} seed {seed}: in zoo.jsonl", flush=True)
                    continue
                print(f"{time.strftime('%H:%M:%S')} {data} {model} seed {seed}", flush=True)
                row = one(data, model, seed, args.epochs, config, args.runs, args.tag, args.variant)
                append_result("zoo", row)
                print(f"{time.strftime('%H:%M:%S')} done {data} {model} seed {seed}: {row['epochs_run']} epochs "
                      f"(best {row['best_epoch']}), {row['train_wall_s']} s wall", flush=True)


if __name__ == "__main__":
    main()
