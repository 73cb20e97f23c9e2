"""Pipeline jobs for the tests of basketgnn.pipeline: a job file written from sections, a run with
its console captured, and what the tests compare (stage statuses, outputs, metrics without
timings)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.console import Console

from basketgnn.data.synth import generate_log, write_log
from basketgnn.pipeline.run import run_pipeline

K = 5
DNNTSP = {"epochs": 4, "embed_dim": 8, "threads": 1, "lr": 0.01}
ALL_STAGES = ["prepare", "split", "fit_dnntsp", "evaluate", "recommend", "report"]
OUTPUTS = [
    "recommendations.parquet",
    "recommendations.csv",
    "metrics.json",
    "report.html",
    "report_training.png",
    "report_metrics_at_k.png",
    "report_repeat_explore.png",
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BASELINES_ONLY = {
    "models": {"baselines": ["p-topfreq"], "dnntsp": None},
    "recommend": {"model": "p-topfreq"},
}
#: The nightly job's ``train`` section and its (one-epoch, unfused) DNNTSP.
NIGHTLY = {"warm_start": "previous", "sample_customers": 80, "sample_seed": 1}
NIGHTLY_DNNTSP = {"epochs": 1, "embed_dim": 8, "threads": 1, "lr": 0.01, "fusion": "off"}


@contextlib.contextmanager
def torch_threads_kept() -> Iterator[None]:
    """The jobs train with threads: 1, which torch keeps process-wide: restored on leaving."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def write_log_file(path: Path) -> tuple[Path, pd.DataFrame]:
    """The tests' transaction log (150 customers, 50 items) written to ``path``."""
    # 50 items: DNNTSP's validation ranks a top 40 (basketgnn.metrics.KS).
    df = generate_log(n_customers=150, n_items=50, mean_baskets=6, seed=0)
    write_log(df, path)
    return path, df


def write_job(folder: Path, log_path: Path, **sections: dict[str, Any]) -> Path:
    """A pipeline file in ``folder`` (run_dir ``folder/run``, paths relative to the file)."""
    cfg: dict[str, Any] = {
        "run_dir": "run",
        "input": {"path": os.path.relpath(log_path, folder)},
        "models": {"baselines": ["p-topfreq"], "dnntsp": dict(DNNTSP)},
        "recommend": {"k": K},
        "report": {"title": "Pipeline test"},
    }
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values} if isinstance(values, dict) else values
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(config: Path, console_out: io.StringIO | None = None) -> dict[str, Any]:
    """Run the job without progress bars; its console lines go to ``console_out``."""
    console = Console(file=console_out or io.StringIO(), width=200)
    return run_pipeline(config, progress=False, console=console)


def status(summary: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in summary["stages"]}


def without_timings(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: without_timings(v) for k, v in obj.items() if k not in ("timing_s", "train_seconds")
        }
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


def copy_of_run(first: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    """A copy of run A's run folder in ``tmp_path`` (a job written there uses it)."""
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    return tmp_path / "run"


def raising_for(name: str, real: Callable[..., Any], error: BaseException) -> Callable[..., Any]:
    """``real``, except that it raises ``error`` when its first argument is a file ``name``."""

    def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name == name:
            raise error
        return real(path, *args, **kwargs)

    return wrapper


def night_two(df: pd.DataFrame) -> pd.DataFrame:
    """The next night's log: one item gone, one new item, one new customer."""
    gone = df["item_id"].value_counts().index[-1]
    df = df[df["item_id"] != gone].copy()
    first = df[df["customer_id"] == df["customer_id"].iloc[0]].copy()
    first["customer_id"] = "C-new"
    first["basket_id"] = "N" + first["basket_id"]
    first.loc[first.index[-1], "item_id"] = "I-new"
    return pd.concat([df, first], ignore_index=True)


def nightly_runs(folder: Path) -> dict[str, Any]:
    """Night 1 (from scratch: nothing before), its rerun, night 2 (warm), its rerun, in one run
    folder with ``keep_runs: 1``; their summaries and what the tests read of night 2."""
    df = generate_log(n_customers=150, n_items=50, mean_baskets=6, seed=0)
    log = folder / "log.csv"
    write_log(df, log)
    job = write_job(
        folder,
        log,
        train=NIGHTLY,
        models={"baselines": ["p-topfreq"], "dnntsp": NIGHTLY_DNNTSP},
        keep_runs=1,
    )
    out: dict[str, Any] = {"job": job, "run_dir": folder / "run"}
    out["night1"] = run(job)
    out["night1_metrics"] = json.loads((folder / "run" / "metrics.json").read_text())
    out["rerun1"] = run(job)
    df2 = night_two(df)
    write_log(df2, log)
    out["night2"] = run(job)
    out["night2_metrics"] = json.loads((folder / "run" / "metrics.json").read_text())
    out["night2_html"] = (folder / "run" / "report.html").read_text()
    out["night2_recs"] = pd.read_parquet(folder / "run" / "recommendations.parquet")
    out["night2_log"] = df2
    out["rerun2"] = run(job)
    return out
