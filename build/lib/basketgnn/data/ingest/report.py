"""The record of a prepared dataset: where it came from and how (``meta``), and the report's
counts as lines for a person."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest.options import Columns, PrepareOptions


def report_lines(report: dict[str, Any]) -> list[str]:
    """What ``where``, returns and the caps did, one line each, from a dataset's
    ``meta["report"]`` (only the steps that ran: their keys are present)."""
    lines = []
    read = report.get("rows_read")
    of = f" of {read:,} read" if read else ""
    if "rows_dropped_where" in report:
        lines.append(f"rows dropped by where: {report['rows_dropped_where']:,}{of}")
    if "returns_excluded" in report:
        lines.append(f"returns excluded (quantity <= 0): {report['returns_excluded']:,} rows")
    if "returns_kept" in report:
        lines.append(f"returns kept as purchases (quantity <= 0): {report['returns_kept']:,} rows")
    if "baskets_capped" in report:
        lines.append(
            f"basket cap: {report['baskets_capped']:,} baskets capped, "
            f"{report['items_dropped_basket_cap']:,} items dropped"
        )
    if "baskets_dropped_last_n" in report:
        lines.append(f"last-N cap: {report['baskets_dropped_last_n']:,} older baskets dropped")
    if report.get("rows_dropped_rare_items"):
        lines.append(
            f"rare items (--min-item-baskets): {report['rows_dropped_rare_items']:,} rows dropped"
        )
    if report.get("customers_dropped_basket_count"):
        lines.append(
            f"customers dropped for their number of baskets (--min-baskets / --max-baskets): "
            f"{report['customers_dropped_basket_count']:,}"
        )
    return lines


def record_source(
    data: BasketData,
    path: str | Path,
    columns: Columns,
    options: PrepareOptions,
    report: dict[str, Any],
    **extra: Any,
) -> None:
    """Store where a prepared dataset came from and how (its meta.json), for either engine."""
    data.meta.update(
        source=str(path),
        source_kind="log",
        columns=columns.model_dump(),
        options=options.model_dump(),
        report=report,
        **extra,
    )
