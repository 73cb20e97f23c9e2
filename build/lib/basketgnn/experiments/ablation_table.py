"""The ablation's table (``table.md``) and chart (``chart.png``), made from result records alone
(:mod:`basketgnn.experiments.ablation_results`), so they can be regenerated at any time.

Runs are grouped per dataset by ``(variant, config_hash)``: the seeds of one setting form one
row, summarised by the mean and the sample standard deviation of each metric over the runs where
it is defined. Rows are the trained variants, then the baselines, each in order of first
appearance. The record keys read: dataset, variant, config_hash, kind, split, metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from basketgnn.errors import UserError
from basketgnn.experiments.ablation_spec import DEFAULT_TABLE_METRICS
from basketgnn.io_utils import atomic_path, write_text
from basketgnn.results_table import ResultTable, to_markdown


@dataclass(frozen=True)
class _Row:
    label: str
    kind: str
    values: dict[str, np.ndarray]  # metric -> defined values over runs
    n: int

    @property
    def baseline(self) -> bool:
        return self.kind == "baseline"


def _summarise(
    results: list[dict[str, Any]], metrics: list[str]
) -> tuple[dict[str, list[_Row]], dict[str, str]]:
    """Rows per dataset (trained variants first, then baselines, each in order of first
    appearance) and the split name(s) per dataset."""
    groups: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}
    splits: dict[str, set[str]] = {}
    for r in results:
        by_key = groups.setdefault(r["dataset"], {})
        by_key.setdefault((r["variant"], r["config_hash"]), []).append(r)
        splits.setdefault(r["dataset"], set()).add(str(r.get("split")))
    tables = {}
    for dataset, by_key in groups.items():
        settings_per_name: dict[str, int] = {}
        for name, _ in by_key:
            settings_per_name[name] = settings_per_name.get(name, 0) + 1
        rows = []
        for (name, config_hash), runs in by_key.items():
            # Two settings under one name only happen with unfiltered lines; keep them apart.
            label = name if settings_per_name[name] == 1 else f"{name} [{config_hash[:6]}]"
            values = {
                m: np.array([v for r in runs if (v := r["metrics"].get(m)) is not None], float)
                for m in metrics
            }
            rows.append(_Row(label, str(runs[0].get("kind")), values, len(runs)))
        rows.sort(key=lambda row: row.baseline)  # stable: keeps first-appearance order
        tables[dataset] = rows
    return tables, {d: ", ".join(sorted(s)) for d, s in splits.items()}


def _mean_std(values: np.ndarray) -> tuple[float, float]:
    if len(values) == 0:
        return math.nan, math.nan
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def _result_table(rows: list[_Row], metrics: list[str], digits: int) -> ResultTable:
    """One dataset's rows as a table of means, with the spread of rows of several runs."""
    stats = [[_mean_std(row.values[m]) for m in metrics] for row in rows]
    return ResultTable(
        rows=[row.label for row in rows],
        columns=metrics,
        values=[[None if math.isnan(mean) else mean for mean, _ in line] for line in stats],
        spread=[
            [std if len(row.values[m]) > 1 else None for m, (_, std) in zip(metrics, line)]
            for row, line in zip(rows, stats)
        ],
        counts=[row.n for row in rows],
        digits=digits,
        best_of_one=True,
    )


def write_table(
    results: list[dict[str, Any]],
    path: str | Path,
    metrics: Iterable[str] = DEFAULT_TABLE_METRICS,
    digits: int = 4,
) -> str:
    """Markdown tables (one per dataset) of mean ± sample std over seeds, from result records.

    Rows are trained variants then baselines, columns ``n`` and ``metrics``. The best mean of
    each column is bold, compared at the printed precision, so cells that print equal are all
    bold. Written atomically; the text is also returned.
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
        out += to_markdown(_result_table(rows, metrics, digits), first="variant")
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
    colours: dict[str, str] = {}
    for ax, (dataset, rows) in zip(axes, tables.items()):
        _draw_panel(ax, dataset, rows, metrics, colours)
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


def _draw_panel(
    ax: Any, dataset: str, rows: list[_Row], metrics: list[str], colours: dict[str, str]
) -> None:
    """One dataset's bars; ``colours`` (label -> colour) is shared by the panels, so that one
    name has one colour everywhere and the legend holds for all of them."""
    palette = [f"C{i}" for i in range(10)]
    x = np.arange(len(metrics))
    width = 0.8 / len(rows)
    for j, row in enumerate(rows):
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
            hatch="//" if row.baseline else None,
            edgecolor="white" if row.baseline else None,
        )
    ax.set_title(dataset)
    ax.set_xticks(x, metrics, rotation=30, ha="right")
    ax.set_ylabel("test score (mean ± std over seeds)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
