"""Checks and messages shared by the ingestion engine (:mod:`.duckdb_engine`) and its test
oracle: which files a log is, whether its columns are there, and the user errors for bad rows,
bad timestamps and empty results."""

from __future__ import annotations

from pathlib import Path

from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.errors import UserError

LOG_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")


def check_basket_or_time(columns: Columns) -> None:
    if columns.basket is None and columns.timestamp is None:
        raise UserError(
            "Neither a basket column nor a timestamp column is set: set at least one "
            "(--basket-col or --time-col)."
        )


def bad_rows_error(problems: list[str]) -> UserError:
    return UserError(
        "Bad rows in the log: " + " | ".join(problems) + ". Fix or remove these rows, "
        "or skip them with --on-bad-rows skip."
    )


# A prepared dataset stores times as int64 nanoseconds since the epoch (as pandas does): the whole
# days it can hold. Timestamps outside are bad rows, reported apart from unparsable ones.
TIME_RANGE = ("1677-09-22", "2262-04-11")


def unparsable_time(column: str, time_format: str | None = None) -> str:
    """The bad-rows problem of timestamps that cannot be read as a date."""
    if time_format is not None:
        return f"a timestamp in {column!r} not in --time-format {time_format!r} (unparsable)"
    return (
        f"an unparsable timestamp in {column!r} (dates are read as ISO, YYYY-MM-DD HH:MM; "
        "name other spellings with --time-format, e.g. '%m/%d/%Y %H:%M')"
    )


def time_out_of_range(column: str) -> str:
    """The bad-rows problem of dates outside :data:`TIME_RANGE` (placeholders such as
    0001-01-01 or 9999-12-31, or typos in the year)."""
    return (
        f"a timestamp in {column!r} outside {TIME_RANGE[0]} .. {TIME_RANGE[1]}, the dates "
        "basketgnn can store (replace placeholder dates such as 9999-12-31 with real ones)"
    )


def no_customer_left(options: PrepareOptions) -> UserError:
    return UserError(
        f"No customer is left with at least {options.min_baskets} baskets"
        + (f" and at most {options.max_baskets}" if options.max_baskets else "")
        + " after filtering. A customer needs at least 2 baskets (a history and a target): "
        "check the basket/timestamp columns, or relax --min-baskets, --max-baskets or "
        "--min-item-baskets."
    )


def log_files(path: str | Path) -> list[Path]:
    """The log files at ``path``: the file itself, or every CSV/Parquet file in the folder."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder. Check the path of the transaction log.")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and _is_log(p))
        if not files:
            raise UserError(
                f"{path}: the folder holds no .csv or .parquet files. "
                "Put the transaction log files there or pass one file."
            )
        return files
    if not _is_log(path):
        raise UserError(
            f"{path}: not a CSV or Parquet file (expected one of {', '.join(LOG_SUFFIXES)}). "
            "Convert the log to CSV or Parquet, or rename it if it already is one."
        )
    return [path]


def _is_log(p: Path) -> bool:
    return p.name.lower().endswith(LOG_SUFFIXES)


def check_columns(f: Path, wanted: list[str], available: list[str], columns: Columns) -> None:
    missing = [c for c in wanted if c not in available]
    if missing:
        flags = {
            columns.customer: "--customer-col",
            columns.item: "--item-col",
            columns.basket: "--basket-col",
            columns.timestamp: "--time-col",
            columns.quantity: "--quantity-col",
        }
        fixes = ", ".join(f"{flags[c]} for {c!r}" for c in missing)
        raise UserError(
            f"{f}: missing column(s) {', '.join(repr(c) for c in missing)}; the file has "
            f"{', '.join(repr(c) for c in available)}. Name the right columns ({fixes})."
        )
