"""The one result-table renderer: result rows -> a :class:`ResultTable` (values, spread, best
per column) -> text for a terminal (rich), a log line, Markdown or HTML.

The CLI (``evaluate``, ``demo``), the pipeline's log and report, and the ablation's ``table.md``
all render through here, so "best" means the same everywhere: the highest value of a column
at the printed precision (cells that print equal are all best), and only when there is more
than one row to compare.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResultTable:
    """Rows (models or variants) x columns (metrics).

    ``values[i][j]``: row i's value of column j (the mean over runs; None = undefined);
    ``spread[i][j]``: its sample std over ``counts[i]`` runs (None: a single value).
    """

    rows: list[str]
    columns: list[str]
    values: list[list[float | None]]
    spread: list[list[float | None]] | None = None
    counts: list[int] | None = None
    digits: int = 4
    best_of_one: bool = False  # mark a lone row's values best too (the ablation's tables do)

    def best(self, j: int) -> float | None:
        """The best value of column j at the printed precision (None when nothing compares)."""
        vals = [round(v, self.digits) for row in self.values if (v := row[j]) is not None and not math.isnan(v)]
        return max(vals) if vals and (len(self.rows) > 1 or self.best_of_one) else None

    def cell(self, i: int, j: int, missing: str = "–") -> tuple[str, bool]:
        """(text, is best) of one cell."""
        v = self.values[i][j]
        if v is None or math.isnan(v):
            return missing, False
        text = f"{v:.{self.digits}f}"
        s = self.spread[i][j] if self.spread is not None else None
        if s is not None:
            text += f" ± {s:.{self.digits}f}"
        return text, round(v, self.digits) == self.best(j)


def from_records(records: Sequence[dict[str, Any]], columns: Sequence[str], label: str = "model") -> ResultTable:
    """One row per result record (``{label: ..., "metrics": {...}}``, as ModelResult.to_json)."""
    return ResultTable(
        rows=[str(r[label]) for r in records],
        columns=list(columns),
        values=[[r["metrics"].get(c) for c in columns] for r in records],
    )


def to_markdown(table: ResultTable, first: str = "model") -> list[str]:
    """Markdown lines; with ``counts`` an ``n`` column follows the row label."""
    with_n = table.counts is not None
    out = [
        f"| {first} | " + ("n | " if with_n else "") + " | ".join(table.columns) + " |",
        "|---|" + ("---:|" if with_n else "") + "---:|" * len(table.columns),
    ]
    for i, row in enumerate(table.rows):
        cells = []
        for j in range(len(table.columns)):
            text, best = table.cell(i, j)
            cells.append(f"**{text}**" if best else text)
        n = f"{table.counts[i]} | " if table.counts is not None else ""
        out.append(f"| {row} | {n}" + " | ".join(cells) + " |")
    return out


def to_html(table: ResultTable, extra: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """An HTML table, rows as given; ``extra`` adds (header, one text per row) columns."""
    e = html.escape
    header = "".join(f"<th>{e(c)}</th>" for c in table.columns) + "".join(f"<th>{e(h)}</th>" for h, _ in extra)
    rows = []
    for i, row in enumerate(table.rows):
        cells = []
        for j in range(len(table.columns)):
            text, best = table.cell(i, j, missing="n/a")
            cells.append(f"<td>{'<b>' + text + '</b>' if best else text}</td>")
        cells += [f"<td>{e(texts[i])}</td>" for _, texts in extra]
        rows.append(f"<tr><th>{e(row)}</th>{''.join(cells)}</tr>")
    return f"<table><tr><th>model</th>{header}</tr>{''.join(rows)}</table>"


def to_rich(table: ResultTable, extra_rows: Sequence[tuple[str, Sequence[str]]] = ()) -> Any:
    """A rich Table with metrics as rows and the table's rows (models) as columns, a section per
    cut-off; ``extra_rows`` adds (label, one text per model) rows at the end."""
    from rich.table import Table

    out = Table()
    out.add_column("metric")
    for row in table.rows:
        out.add_column(row, justify="right")
    for j, column in enumerate(table.columns):
        cells = []
        for i in range(len(table.rows)):
            text, best = table.cell(i, j, missing="-")
            cells.append(f"[bold]{text}[/]" if best else text)
        next_k = table.columns[j + 1].split("@")[-1] if j + 1 < len(table.columns) else None
        out.add_row(column, *cells, end_section=next_k != column.split("@")[-1])
    for label, texts in extra_rows:
        out.add_row(label, *texts)
    return out


def to_line(table: ResultTable, i: int, width: int = 10) -> str:
    """Row i as one log line: ``name: metric value  metric value ...`` (undefined left out)."""
    parts = [
        f"{c} {v:.{table.digits}f}"
        for c, v in zip(table.columns, table.values[i])
        if v is not None and not math.isnan(v)
    ]
    return f"{table.rows[i]:>{width}}: " + "  ".join(parts)
