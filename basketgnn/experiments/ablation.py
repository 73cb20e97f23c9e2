"""The ablation grid: variants of a trained model (DNNTSP by default; any registry name) ×
datasets × seeds, plus baselines, from one YAML spec. Each run goes through the one workflow
core (:mod:`basketgnn.workflow`).

Data flow (each arrow one function):

    spec YAML -> :func:`load_spec` (validated :class:`Grid` of planned :class:`Run`\\ s)
              -> :func:`run_grid` (train + test each pending run, append one JSON line)
              -> ``results.jsonl`` -> :func:`read_results` / :func:`current_results`
              -> :func:`write_table` (``table.md``) and :func:`write_chart` (``chart.png``)

A run is identified by its key ``(dataset, variant, seed, config_hash, data_hash)``; a key already
present in ``results.jsonl`` is not run again, so an interrupted grid is resumed by running it
again and a changed variant (new hash) is rerun while the unchanged ones are kept. ``config_hash``
covers the variant's settings and the split spec, but not the seed (its own part of the key, so
that all seeds of one setting share a hash, which is how the table groups them) nor ``threads`` /
``device``, which only decide how fast a run goes, so moving to another machine does not redo
finished runs. ``data_hash`` (:func:`dataset_hash`) is the dataset's content: when the file
behind a dataset name changes, its runs are redone, and the old lines no longer count (nor do
lines written before data_hash existed).

Each line of ``results.jsonl`` holds::

    dataset, data_path, data_hash, variant, kind (the trained model's registry name, e.g.
    "dnntsp", or "baseline"), seed (null for baselines), config (the trained model's full
    effective config, or the fitted baseline's parameters),
    config_hash,
    split (name of the split used), metrics (every metric of evaluate_model on the test part;
    null where undefined), train_s, score_s, best_epoch, epochs_run (null for baselines),
    neighbours (the ranking add-on chosen on validation, {kind, k, weight}: kind "tifu-fusion"
    (fusion: tifu, k TIFU's) or "neighbours"; lines written before the fusion have no kind;
    null for baselines and fusion: off; absent in lines written before it was recorded),
    finished_at (UTC, ISO 8601)

Tables and charts are made from these lines only, so they can be regenerated at any time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from basketgnn import registry, workflow
from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import load_data
from basketgnn.data.split import Split, make_split
from basketgnn.errors import UserError
from basketgnn.fingerprint import source_fingerprint
from basketgnn.io_utils import atomic_path, write_text
from basketgnn.metrics import KS
from basketgnn.registry import make_baseline
from basketgnn.results_table import ResultTable, to_markdown
from basketgnn.workflow.config import (
    Settings,
    describe_validation_error,
    load_config,
    load_yaml,
    resolve_path,
)

RESULTS_FILE = "results.jsonl"
TABLE_FILE = "table.md"
CHART_FILE = "chart.png"

#: Every metric name evaluate_model reports (see basketgnn.metrics.ranking_metrics).
METRIC_NAMES: tuple[str, ...] = tuple(
    f"{prefix}{m}@{k}"
    for prefix in ("", "repeat_", "explore_")
    for m in ("recall", "ndcg", "phr")
    for k in KS
)
DEFAULT_TABLE_METRICS: tuple[str, ...] = (
    "recall@10",
    "ndcg@10",
    "phr@10",
    "recall@20",
    "ndcg@20",
    "phr@20",
)

# Left out of config_hash: the seed is a separate part of the run key; threads and device
# change how fast a run goes, not what it measures.
_UNHASHED_KEYS = ("seed", "threads", "device")


class AblationSpec(BaseModel):
    """The YAML file, as written (paths not yet resolved)."""

    model_config = ConfigDict(extra="forbid")

    out: str = Field(description="Folder for results.jsonl, table.md and chart.png.")
    datasets: dict[str, str] = Field(
        min_length=1, description="name: path of a prepared dataset folder or a DNNTSP .json."
    )
    model: str = Field(
        registry.DEFAULT_MODEL,
        description="Registry name of the trained model whose variants are compared.",
    )
    seeds: list[int] = Field([0], min_length=1, description="Seeds of every variant.")
    split: str = Field("auto", description="Split spec of make_split, or a split .json file.")
    base: dict[str, Any] = Field(
        default_factory=dict, description="Config overrides of `model` shared by every variant."
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="name: config overrides on top of base; `model: NAME` in a variant trains "
        "that registered model instead (base then does not apply).",
    )
    baselines: list[str] | dict[str, dict[str, Any]] = Field(
        default_factory=list,
        description="Baseline names, or name: constructor options; run once per dataset.",
    )
    metrics_in_table: list[str] = Field(
        list(DEFAULT_TABLE_METRICS), min_length=1, description="Columns of table and chart."
    )

    @field_validator("base", mode="before")
    @classmethod
    def _null_base(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("variants", "baselines", mode="before")
    @classmethod
    def _null_options(cls, value: Any) -> Any:
        # `full:` with nothing after it is YAML null; it means "no overrides".
        if isinstance(value, dict):
            return {k: ({} if v is None else v) for k, v in value.items()}
        return [] if value is None else value

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds repeat a value: {seeds}")
        return seeds

    @field_validator("metrics_in_table")
    @classmethod
    def _known_metrics(cls, metrics: list[str]) -> list[str]:
        unknown = [m for m in metrics if m not in METRIC_NAMES]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; valid: {', '.join(METRIC_NAMES)}")
        return metrics


RunKey = tuple[str, str, int | None, str, str | None]
"""(dataset, variant, seed, config_hash, data_hash) of a run or a results line."""


@dataclass(frozen=True)
class Run:
    """One planned run of the grid."""

    dataset: str
    variant: str
    kind: str
    """The trained model's registry name, or "baseline"."""
    seed: int | None
    config: dict[str, Any]
    """A trained model: its full effective config. Baseline: its constructor options."""
    config_hash: str
    data_hash: str
    """The dataset's content (:func:`dataset_hash`)."""

    @property
    def key(self) -> RunKey:
        return (self.dataset, self.variant, self.seed, self.config_hash, self.data_hash)


@dataclass(frozen=True)
class Grid:
    """A validated spec with resolved paths and the planned runs, in the order they run."""

    spec_path: Path
    spec: AblationSpec
    out: Path
    dataset_paths: dict[str, Path]
    split: str
    runs: list[Run]

    @property
    def results_path(self) -> Path:
        return self.out / RESULTS_FILE

    @property
    def table_path(self) -> Path:
        return self.out / TABLE_FILE

    @property
    def chart_path(self) -> Path:
        return self.out / CHART_FILE


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


# --- the spec ---------------------------------------------------------------------------------


def load_spec(spec_path: str | Path) -> Grid:
    """Read and validate an ablation YAML; relative paths in it are relative to its folder.

    Everything a user can get wrong (unknown keys, bad overrides, unknown baselines, missing
    dataset files) is a :class:`UserError` naming it, raised before anything is trained.
    """
    spec_path = Path(spec_path)
    raw = load_yaml(spec_path, "the ablation spec (a mapping: out, datasets, ...)")
    try:
        spec = AblationSpec(**raw)
    except ValidationError as e:
        raise UserError(f"{spec_path}: {describe_validation_error(e, AblationSpec)}.") from None

    root = spec_path.resolve().parent
    dataset_paths = {}
    for name, rel in spec.datasets.items():
        path = resolve_path(root, rel)
        if not path.exists():
            raise UserError(
                f"{spec_path}: dataset {name!r}: {rel} not found (looked for {path}; relative "
                "paths are relative to the spec file's folder)."
            )
        dataset_paths[name] = path
    data_hashes = {name: dataset_hash(path, spec_path, name) for name, path in dataset_paths.items()}
    split = spec.split
    if split.endswith(".json"):
        split = str(resolve_path(root, split))
        if not Path(split).is_file():
            raise UserError(f"{spec_path}: split file {spec.split} not found (looked for {split}).")

    baselines: dict[str, dict[str, Any]] = (
        spec.baselines
        if isinstance(spec.baselines, dict)
        else {name: {} for name in spec.baselines}
    )
    registry.check_name(spec.model, f"{spec_path}: model: ", "neural")
    for name in baselines:
        registry.check_name(name, f"{spec_path}: baselines: ", "baseline")
    clash = sorted(set(baselines) & set(spec.variants))
    if clash:
        raise UserError(f"{spec_path}: {clash} name both a variant and a baseline; rename one.")
    if not spec.variants and not baselines:
        raise UserError(f"{spec_path}: no variants and no baselines: nothing to run.")
    # base alone first, so that a bad key there is reported as base's, not the first variant's.
    _variant_config(spec_path, {}, "base", spec.base, spec.model)
    configs: dict[str, tuple[str, Settings]] = {}
    for name, o in spec.variants.items():
        model = o.get("model", spec.model)
        if not isinstance(model, str):
            raise UserError(f"{spec_path}: variant {name!r}: model must be a registry name.")
        registry.check_name(model, f"{spec_path}: variant {name!r}: model: ", "neural")
        overrides = {k: v for k, v in o.items() if k != "model"}
        base = spec.base if model == spec.model else {}
        configs[name] = (model, _variant_config(spec_path, base, name, overrides, model))
    for name, options in baselines.items():
        try:
            make_baseline(name, **options)  # fail now on bad options, not after hours of DNNTSP
        except UserError as e:
            raise UserError(f"{spec_path}: baselines: {e}") from None

    runs = []
    for dataset in spec.datasets:
        # Baselines first: they are quick and give the reference line of a partial table early.
        for name, options in baselines.items():
            runs.append(
                Run(
                    dataset,
                    name,
                    "baseline",
                    None,
                    options,
                    _hash({"baseline": name, "options": options, "split": spec.split}),
                    data_hashes[dataset],
                )
            )
        # Seed-major, so a grid stopped early has every variant at the first seeds.
        for seed in spec.seeds:
            for name, (model, config) in configs.items():
                full = config.update(seed=seed).dump()
                hashed = {k: v for k, v in full.items() if k not in _UNHASHED_KEYS}
                runs.append(
                    Run(
                        dataset,
                        name,
                        model,
                        seed,
                        full,
                        _hash({model: hashed, "split": spec.split}),
                        data_hashes[dataset],
                    )
                )
    return Grid(spec_path, spec, resolve_path(root, spec.out), dataset_paths, split, runs)


def _variant_config(
    spec_path: Path, base: dict[str, Any], name: str, overrides: dict[str, Any], model: str
) -> Settings:
    where = f"{spec_path}: " + ("base" if name == "base" else f"variant {name!r}")
    if "seed" in overrides:
        raise UserError(f"{where}: 'seed' is set per run by `seeds`; remove it here.")
    values = {**base, **overrides}
    for key, value in values.items():
        field = registry.config_class(model).model_fields.get(key)
        # PyYAML reads a bare off/no/yes as a boolean; `gate: off` would otherwise fail obscurely.
        if field is not None and isinstance(value, bool) and field.annotation is not bool:
            raise UserError(
                f'{where}: {key}: {value!r} is a YAML boolean; quote the value (e.g. {key}: "off").'
            )
    try:
        return load_config(None, model=model, **values)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def _hash(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dataset_hash(path: Path, spec_path: Path | None = None, name: str | None = None) -> str:
    """The dataset's content on disk (:func:`basketgnn.fingerprint.source_fingerprint`);
    ``spec_path`` and ``name`` only serve the error message."""
    where = f"{spec_path}: dataset {name!r}: " if spec_path is not None else ""
    return source_fingerprint(path, where)


# --- results.jsonl ----------------------------------------------------------------------------


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every record in a results file, in file order; [] if it does not exist.

    A last line without its newline is the trace of a crash mid-write and is ignored (that run
    is redone). Any other line that is not a JSON record is a :class:`UserError` naming it.
    """
    path = Path(path)
    if not path.exists():
        return []
    *lines, tail = path.read_text().split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            raise UserError(
                f"{path}: line {number} is not a result record; fix or delete that line."
            )
        records.append(record)
    if tail.strip():
        complete = _parse(tail)  # a whole record whose newline alone is missing still counts
        if complete is not None:
            records.append(complete)
    return records


def _parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    keys = ("dataset", "variant", "seed", "config_hash", "metrics")
    return record if isinstance(record, dict) and all(k in record for k in keys) else None


def record_key(record: dict[str, Any]) -> RunKey:
    """The key of a results line; a line written before data_hash existed has None there, so it
    matches no planned run (whose data_hash is always set) and that run is redone."""
    return (
        record["dataset"],
        record["variant"],
        record["seed"],
        record["config_hash"],
        record.get("data_hash"),
    )


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as one line, durably: a crash leaves the earlier lines intact."""
    line = json.dumps(record, allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _repair_tail(path: Path) -> None:
    """Make the file end at a line boundary before appending to it.

    A partial last line (crash mid-write) is cut off; otherwise the next record would be glued
    to it and both lost. A complete record that only lacks its newline gets one.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    if _parse(data[cut:].decode("utf-8", errors="replace")) is not None:
        with open(path, "ab") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
    else:
        with open(path, "r+b") as f:
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())


def current_results(
    grid: Grid, records: Iterable[dict[str, Any]], only_datasets: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """The records of the grid's planned runs, in grid order (the latest when repeated).

    Lines of runs no longer in the spec (e.g. a variant whose overrides changed) are left out,
    so a table never mixes two settings under one name.
    """
    latest = {record_key(r): r for r in records}
    wanted = None if only_datasets is None else set(only_datasets)
    return [
        latest[run.key]
        for run in grid.runs
        if run.key in latest and (wanted is None or run.dataset in wanted)
    ]


# --- running ----------------------------------------------------------------------------------


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
    _repair_tail(grid.results_path)
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
    """Train on the split's train part (validate chooses epochs / tuning), test on test."""
    trained = run.kind != "baseline"
    entry = workflow.ModelEntry(
        run.kind if trained else run.variant,
        run.config,
    )
    outcome = workflow.train(entry, data, split)
    result = workflow.evaluate(outcome, data, split, "test")
    # A trained model's full config; for a baseline the fitted parameters (for TIFU-KNN they
    # include what validation tuning chose).
    config: dict[str, Any] = run.config if trained else outcome.recommender.params()
    return {
        "dataset": run.dataset,
        "data_path": grid.spec.datasets[run.dataset],
        "data_hash": run.data_hash,
        "variant": run.variant,
        "kind": run.kind,
        "seed": run.seed,
        "config": config,
        "config_hash": run.config_hash,
        "split": split.name,
        # NaN (no user with repeat / explore targets) is not JSON; null says "undefined".
        "metrics": result.metrics,
        "train_s": round(outcome.fit_s, 3),
        "score_s": result.timing_s["score"],
        "best_epoch": result.best_epoch if trained else None,
        "epochs_run": result.epochs_run if trained else None,
        "fusion": result.fusion,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def ablate(
    spec_path: str | Path,
    only_datasets: Iterable[str] | None = None,
    table_only: bool = False,
    progress: Callable[[RunEvent], None] | None = None,
) -> AblationOutputs:
    """Run the grid (unless ``table_only``), then write table.md and chart.png from every
    dataset's current results. The entry point of ``pipelines/ablate.py`` and the CLI."""
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
    return f"{head}  {at10}  train {r['train_s']:.1f}s{epochs}  test {r['score_s']:.1f}s"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


# --- table and chart --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    label: str
    kind: str
    values: dict[str, np.ndarray]  # metric -> defined values over runs
    n: int


def _summarise(
    results: list[dict[str, Any]], metrics: Iterable[str]
) -> tuple[dict[str, list[_Row]], dict[str, str]]:
    """Rows per dataset (DNNTSP variants first, then baselines, each in order of first
    appearance) and the split name(s) per dataset."""
    metrics = list(metrics)
    groups: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}
    splits: dict[str, set[str]] = {}
    for r in results:
        groups.setdefault(r["dataset"], {}).setdefault((r["variant"], r["config_hash"]), []).append(
            r
        )
        splits.setdefault(r["dataset"], set()).add(str(r.get("split")))
    tables = {}
    for dataset, by_key in groups.items():
        hashes_per_name: dict[str, int] = {}
        for name, _ in by_key:
            hashes_per_name[name] = hashes_per_name.get(name, 0) + 1
        rows = []
        for (name, config_hash), runs in by_key.items():
            # Two settings under one name only happen with unfiltered lines; keep them apart.
            label = name if hashes_per_name[name] == 1 else f"{name} [{config_hash[:6]}]"
            values = {
                m: np.array([v for r in runs if (v := r["metrics"].get(m)) is not None], float)
                for m in metrics
            }
            rows.append(_Row(label, runs[0].get("kind", registry.DEFAULT_MODEL), values, len(runs)))
        rows.sort(key=lambda row: row.kind == "baseline")  # stable: keeps first-appearance order
        tables[dataset] = rows
    return tables, {d: ", ".join(sorted(s)) for d, s in splits.items()}


def _mean_std(values: np.ndarray) -> tuple[float, float]:
    if len(values) == 0:
        return math.nan, math.nan
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def write_table(
    results: list[dict[str, Any]],
    path: str | Path,
    metrics: Iterable[str] = DEFAULT_TABLE_METRICS,
    digits: int = 4,
) -> str:
    """Markdown tables (one per dataset) of mean ± sample std over seeds, from result records.

    Rows are DNNTSP variants then baselines, columns ``n`` and ``metrics``. The best mean of each
    column is bold, compared at the printed precision, so cells that print equal are all bold.
    Written atomically; the text is also returned.
    """
    metrics = list(metrics)
    tables, splits = _summarise(results, metrics)
    out = ["# Ablation", ""]
    for dataset, rows in tables.items():
        out += [
            f"## {dataset}",
            "",
            f"Test part of the `{splits[dataset]}` split; mean ± sample std over seeds "
            "(std omitted for a single run); n = runs; best mean per column in **bold**.",
            "",
        ]
        stats = {m: [_mean_std(row.values[m]) for row in rows] for m in metrics}
        table = ResultTable(
            rows=[row.label for row in rows],
            columns=metrics,
            values=[[None if math.isnan(stats[m][i][0]) else stats[m][i][0] for m in metrics]
                    for i in range(len(rows))],
            spread=[[stats[m][i][1] if len(row.values[m]) > 1 else None for m in metrics]
                    for i, row in enumerate(rows)],
            counts=[row.n for row in rows],
            digits=digits,
            best_of_one=True,
        )
        out += to_markdown(table, first="variant")
        out.append("")
    text = "\n".join(out)
    write_text(path, text)
    return text


def write_chart(
    results: list[dict[str, Any]],
    path: str | Path,
    metrics: Iterable[str] = DEFAULT_TABLE_METRICS,
) -> None:
    """Grouped bar chart PNG from result records: one panel per dataset, one group per metric,
    one bar per variant / baseline (hatched) with its sample std as error bar. Written atomically."""
    # The Figure API with an explicit Agg canvas: no pyplot, no process-wide backend switch.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics = list(metrics)
    tables, _ = _summarise(results, metrics)
    if not tables:
        raise UserError("No results to chart.")
    n_rows_max = max(len(rows) for rows in tables.values())
    panel_width = max(5.0, 0.22 * n_rows_max * len(metrics) + 1.5)
    fig = Figure(figsize=(panel_width * len(tables), 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(tables), squeeze=False)[0]
    colours = {}
    palette = [f"C{i}" for i in range(10)]
    x = np.arange(len(metrics))
    for ax, (dataset, rows) in zip(axes, tables.items()):
        width = 0.8 / len(rows)
        for j, row in enumerate(rows):
            # One colour per name across panels, so the legend holds for all of them.
            colour = colours.setdefault(row.label, palette[len(colours) % len(palette)])
            stats = [_mean_std(row.values[m]) for m in metrics]
            ax.bar(
                x - 0.4 + width * (j + 0.5),
                [mean for mean, _ in stats],
                width,
                # A lone run has no spread to show; a zero-length bar would suggest one.
                yerr=[std for _, std in stats] if row.n > 1 else None,
                capsize=2,
                label=row.label,
                color=colour,
                hatch="//" if row.kind == "baseline" else None,
                edgecolor="white" if row.kind == "baseline" else None,
            )
        ax.set_title(dataset)
        ax.set_xticks(x, metrics, rotation=30, ha="right")
        ax.set_ylabel("test score (mean ± std over seeds)")
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = [], []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    with atomic_path(path) as tmp:
        # The temporary name ends in .tmp, so the format must be given.
        fig.savefig(tmp, format="png", dpi=120)
