"""The ablation grid: variants of a trained model (any neural model of the registry) × datasets ×
seeds, plus baselines, from one YAML spec. Each run goes through the one workflow core
(:mod:`basketgnn.workflow`): ``train`` on the split's training part, ``evaluate`` on its test
part.

Data flow (each arrow one function, each module named after its part):

    spec YAML -> ablation_spec.load_spec       (validated Grid of planned Runs)
              -> ablation.run_grid             (train + test each pending run, append its line)
              -> results.jsonl                 (ablation_results: one ModelResult + grid keys a line)
              -> ablation_table.write_table    (table.md) and write_chart (chart.png)

A run whose key (:class:`~basketgnn.experiments.ablation_spec.Run`) is already in
``results.jsonl`` is not run again, so an interrupted grid is resumed by running it again, a
changed variant (new settings hash) is rerun while the unchanged ones are kept, and moving to
another machine (other threads or device) redoes nothing. When the file behind a dataset name
changes, its runs are redone and its old lines no longer count.

:func:`ablate` is the entry point of the CLI's ``basketgnn ablate`` and ``pipelines/ablate.py``;
the names the front ends and tests use are importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from basketgnn import workflow
from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import load_data
from basketgnn.data.split import Split, make_split
from basketgnn.errors import UserError
from basketgnn.experiments.ablation_results import (
    append_record,
    current_results,
    read_results,
    record_key,
    repair_tail,
    result_record,
)
from basketgnn.experiments.ablation_spec import (
    DEFAULT_TABLE_METRICS,
    METRIC_NAMES,
    Grid,
    Run,
    dataset_hash,
    load_spec,
)
from basketgnn.experiments.ablation_table import write_chart, write_table

__all__ = [
    "DEFAULT_TABLE_METRICS", "METRIC_NAMES", "AblationOutputs", "Grid", "Run", "RunEvent",
    "ablate", "current_results", "dataset_hash", "describe_event", "load_spec", "read_results",
    "run_grid", "write_chart", "write_table",
]  # fmt: skip


@dataclass(frozen=True)
class RunEvent:
    """What :func:`run_grid` reports to its progress callback, once or twice per run."""

    run: Run
    status: Literal["start", "done", "skipped"]
    record: dict[str, Any] | None = None
    """The appended line (``done``) or the existing one (``skipped``)."""


@dataclass(frozen=True)
class AblationOutputs:
    results: list[dict[str, Any]]
    table: Path
    chart: Path


def run_grid(
    spec_path: str | Path,
    only_datasets: Iterable[str] | None = None,
    progress: Callable[[RunEvent], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every pending run of the spec (optionally of some datasets only).

    Each dataset is loaded and split once, and only if one of its runs is pending. Each finished
    run is appended to ``out/results.jsonl`` at once. Returns the records of the selected
    datasets' runs (new and earlier ones), in grid order.
    """
    grid = load_spec(spec_path)
    selected = _select_datasets(grid, only_datasets)
    grid.out.mkdir(parents=True, exist_ok=True)
    repair_tail(grid.results_path)
    done = {record_key(r): r for r in read_results(grid.results_path)}
    notify = progress or (lambda event: None)

    loaded: dict[str, tuple[BasketData, Split]] = {}
    for run in grid.runs:
        if run.dataset not in selected:
            continue
        if run.key in done:
            notify(RunEvent(run, "skipped", done[run.key]))
            continue
        if run.dataset not in loaded:
            # One dataset in memory at a time: the grid is dataset-major.
            loaded.clear()
            data = load_data(grid.dataset_paths[run.dataset])
            loaded[run.dataset] = (data, make_split(data, grid.split))
        data, split = loaded[run.dataset]
        notify(RunEvent(run, "start"))
        record = _execute(grid, run, data, split)
        append_record(grid.results_path, record)
        done[run.key] = record
        notify(RunEvent(run, "done", record))
    return current_results(grid, done.values(), selected)


def _select_datasets(grid: Grid, only_datasets: Iterable[str] | None) -> list[str]:
    if only_datasets is None:
        return list(grid.dataset_paths)
    names = list(only_datasets)
    unknown = [n for n in names if n not in grid.dataset_paths]
    if unknown:
        raise UserError(
            f"Unknown dataset(s) {unknown}; the spec has {', '.join(grid.dataset_paths)}."
        )
    return names


def _execute(grid: Grid, run: Run, data: BasketData, split: Split) -> dict[str, Any]:
    """Train on the split's train part (validation chooses epochs, tuning and the fusion), test
    on its test part; the run's results line."""
    entry = workflow.ModelEntry(run.kind if run.trained else run.variant, run.config)
    outcome = workflow.train(entry, data, split)
    label = str(grid.dataset_paths[run.dataset])
    result = workflow.evaluate(outcome, data, split, "test", label)
    return result_record(grid, run, result)


def ablate(
    spec_path: str | Path,
    only_datasets: Iterable[str] | None = None,
    table_only: bool = False,
    progress: Callable[[RunEvent], None] | None = None,
) -> AblationOutputs:
    """Run the grid (unless ``table_only``), then write table.md and chart.png from every
    dataset's current results."""
    grid = load_spec(spec_path)
    if only_datasets is not None:
        only_datasets = _select_datasets(grid, only_datasets)
    if not table_only:
        run_grid(spec_path, only_datasets, progress)
    # The table covers every dataset with results, not only the ones just run.
    results = current_results(grid, read_results(grid.results_path))
    if not results:
        raise UserError(
            f"{grid.results_path}: no results of this spec yet; run it without --table-only."
        )
    metrics = grid.spec.metrics_in_table
    write_table(results, grid.table_path, metrics)
    write_chart(results, grid.chart_path, metrics)
    return AblationOutputs(results, grid.table_path, grid.chart_path)


def describe_event(event: RunEvent) -> str:
    """One progress line: dataset, variant, seed, then metrics@10 and seconds or the status."""
    run = event.run
    head = f"{run.dataset}  {run.variant}  seed {'-' if run.seed is None else run.seed}"
    if event.status == "start":
        return f"{head}  running..."
    if event.status == "skipped":
        return f"{head}  skipped (done)"
    assert event.record is not None
    r = event.record
    at10 = "  ".join(
        f"{m}@10 {_fmt(r['metrics'].get(f'{m}@10'))}" for m in ("recall", "ndcg", "phr")
    )
    epochs = f" (best epoch {r['best_epoch']}/{r['epochs_run']})" if r["epochs_run"] else ""
    seconds = r["timing_s"]
    return f"{head}  {at10}  train {seconds['fit']:.1f}s{epochs}  test {seconds['score']:.1f}s"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
