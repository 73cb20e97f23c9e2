"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
SHARED = PROJECT.parent / "shared" / "datasets" / "dnntsp"
RESULTS = PROJECT / "benchmarks" / "results"


def shared_dataset(name: str) -> Path:
    path = SHARED / f"{name}.json"
    if not path.is_file():
        sys.exit(f"skipped: {path} not found (the published splits live in ../shared/datasets)")
    return path


def in_turn(items: list | tuple, round_: int) -> list:
    """The codes or variants of an alternating timing in this round's order: as given in even
    rounds, reversed in odd ones, so the VM's drift within a round falls on each in turn."""
    return list(items) if round_ % 2 == 0 else list(reversed(items))


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def append_result(name: str, record: dict) -> None:
    """Append one JSON line to benchmarks/results/NAME.jsonl (one row per run, never scraped)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}
    with open(RESULTS / f"{name}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def tagged_rows(name: str, tag: str) -> list[dict]:
    """The rows of benchmarks/results/NAME.jsonl whose "tag" is ``tag`` ([] without the file)."""
    path = RESULTS / f"{name}.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("tag") == tag]


def runs_without_row(runs: list[Path], name: str, tag: str) -> list[Path]:
    """The run folders that have no row under ``tag`` in results/NAME.jsonl yet (a rerun
    resumes where a killed one stopped)."""
    seen = {r["run"] for r in tagged_rows(name, tag)}
    return [run for run in runs if str(run) not in seen]


def append_new_rows(name: str, runs: list[Path], tag: str, row_of, shown: list[str]) -> None:
    """For each run folder without a row under ``tag`` in results/NAME.jsonl, append
    ``{"tag": tag, **row_of(run)}`` and print its ``run`` and ``shown`` fields (a rerun resumes
    where a killed one stopped)."""
    for run in runs_without_row(runs, name, tag):
        row = {"tag": tag, **row_of(run)}
        append_result(name, row)
        print(json.dumps({k: row[k] for k in ("run", *shown)}), flush=True)


def by_run_group(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by their run folder's name without the seed (``DC-dnntsp-s0`` -> ``DC-dnntsp``)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(Path(r["run"]).name.rsplit("-s", 1)[0], []).append(r)
    return groups


def load_run(run: Path, model_only: bool = True):
    """A trained run's folder (best.pt and split.json): its recommender (the model alone, or with
    ``model_only`` False as it ships, fused when validation chose a fusion), its data aligned to
    the model's items, and its split."""
    from basketgnn.data.ingest import load_data
    from basketgnn.data.split import load_split
    from basketgnn.workflow.training import load_trained

    rec = load_trained(run / "best.pt", "cpu", model_only=model_only)
    data, _ = load_data(Path(rec.checkpoint["data"])).aligned_to(rec.item_ids)
    return rec, data, load_split(run / "split.json", data)


def variants_table(rows: list[dict], variants: list[str], header: list[str], cells) -> str:
    """A Markdown table with one line per (run group, variant): the group's name and run count,
    the variant, then ``cells(runs, variant)``'s columns (``header`` names them all)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, runs in by_run_group(rows).items():
        for variant in variants:
            out.append(f"| {name} ({len(runs)}) | {variant} | " + " | ".join(cells(runs, variant)) + " |")
    return "\n".join(out)


def mean_std(values: list[float]) -> str:
    """``.1234±.0012`` over runs (std 0 for one run)."""
    import statistics

    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f}±{sd:.4f}".replace("0.", ".")


#: The command line of the package, run from the project root.
BIN = [sys.executable, "-m", "basketgnn"]


def train_evaluate(out: Path, model: str, data: Path, seed: int, sets: dict) -> dict:
    """One run as a user types it: ``basketgnn train --model MODEL --data DATA --out OUT --seed S
    --no-progress --set KEY=VALUE ...``, then ``basketgnn evaluate`` of its ``best.pt`` on the
    validation and the test users. Returns the settings, the command, the epochs, the wall time,
    the load and both splits' metrics (train.out / evaluate.out in ``out`` keep the output)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [*BIN, "train", "--model", model, "--data", str(data), "--out", str(out),
           "--seed", str(seed), "--no-progress"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={json.dumps(value) if isinstance(value, bool) else value}"]
    load_before, t0 = os.getloadavg(), time.perf_counter()
    with open(out / "train.out", "a") as f:
        subprocess.run(cmd, cwd=PROJECT, stdout=f, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - t0
    metrics = {}
    for split in ("validate", "test"):
        path = out / f"{split}.json"
        with open(out / "evaluate.out", "a") as f:
            subprocess.run([*BIN, "evaluate", "--checkpoint", str(out / "best.pt"), "--split", split,
                            "--output", str(path)], cwd=PROJECT, stdout=f, stderr=subprocess.STDOUT, check=True)
        metrics[split] = json.loads(path.read_text())["metrics"]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    best = max(log, key=lambda r: r["val_mean_ndcg"])
    return {
        "settings": sets, "command": cmd[2:], "epochs_run": len(log), "best_epoch": best["epoch"],
        "val_mean_ndcg": best["val_mean_ndcg"], "train_wall_s": round(wall, 1),
        "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()],
        "validate": metrics["validate"], "test": metrics["test"], "run_dir": str(out),
    }


#: The @10 and @20 metric names, recall / NDCG / PHR, in the tables' order.
METRIC_NAMES = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]


def cells(metrics: dict, names: list[str]) -> str:
    """``metrics``' values of ``names`` as "0.1234 / 0.5678 / ..." ("-" where absent)."""
    return " / ".join(f"{metrics[n]:.4f}" if n in metrics else "-" for n in names)


def test_cells(test: dict) -> str:
    """A table's three test cells: R / N / P @10, R / N / P @20, repeat / explore recall@10."""
    return (f"{cells(test, METRIC_NAMES[:3])} | {cells(test, METRIC_NAMES[3:])} "
            f"| {cells(test, ['repeat_recall@10', 'explore_recall@10'])}")
