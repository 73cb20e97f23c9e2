"""Transaction logs (CSV / Parquet, a file or a folder) and DNNTSP JSON -> :class:`BasketData`.

One row of a log is one item bought by one customer in one basket. A basket is identified by a
basket-id column, or by (customer, timestamp) when there is none. Baskets are ordered by time
(their earliest timestamp) or, without a timestamp column, by basket id (numerically when every
id is a number). Items are de-duplicated within a basket.

What happens to a log's rows, in this order (every count lands in ``meta["report"]``):

1. ``where``: rows for which the SQL condition is not true are dropped (``rows_dropped_where``);
2. returns: with a quantity column, rows whose quantity is <= 0 are excluded
   (``returns_excluded``), or kept as ordinary rows with ``keep_returns`` (``returns_kept``);
3. bad rows (no customer / item / basket id, unparsable timestamp, missing or non-numeric
   quantity) stop the run, or are skipped with ``on_bad_rows="skip"`` (``rows_skipped``);
4. duplicates of an item within a basket count once (``duplicate_items_in_basket``);
5. ``min_item_baskets`` drops rare items (``rows_dropped_rare_items``);
6. ``max_basket_items`` caps a basket at its N most popular items (``baskets_capped``,
   ``items_dropped_basket_cap``);
7. ``last_n`` keeps each customer's last N baskets (``baskets_dropped_last_n``);
8. ``min_baskets`` / ``max_baskets`` drop customers (``customers_dropped_basket_count``).

Rows dropped by 1 or 2 are never checked for bad values: a cancelled line without a customer does
not stop the run.

Where things are: :mod:`.options` (the column names and options a user sets), :mod:`.duckdb_engine`
(the engine, out of core; its steps in :mod:`.stage`, :mod:`.validate` and :mod:`.build`, its SQL
text helpers in :mod:`.sql`), :mod:`.checks` (checks and user errors shared with the test oracle),
:mod:`.report` (the dataset's record and the report's lines), :mod:`.json_splits` (the DNNTSP
JSON splits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest.checks import LOG_SUFFIXES, log_files
from basketgnn.data.ingest.json_splits import read_dnntsp_json
from basketgnn.data.ingest.options import DEFAULT_MAX_BASKET_ITEMS, Columns, PrepareOptions
from basketgnn.data.ingest.report import record_source, report_lines
from basketgnn.errors import UserError

__all__ = [
    "DEFAULT_MAX_BASKET_ITEMS", "LOG_SUFFIXES", "Columns", "PrepareOptions", "load_data",
    "log_files", "prepare_log", "read_dnntsp_json", "record_source", "report_lines",
]  # fmt: skip


def prepare_log(
    path: str | Path,
    columns: Columns = Columns(),
    options: PrepareOptions = PrepareOptions(),
    **engine: Any,
) -> BasketData:
    """Read a transaction log and build the prepared dataset, with DuckDB, out of core.

    ``engine`` takes DuckDB's settings (``memory_limit="1GB"``, ``threads=2``, ``temp_dir``; see
    :func:`basketgnn.data.ingest.duckdb_engine.prepare_log_duckdb`). Raises :class:`UserError` with
    file, row and column for every problem a user can fix.
    """
    from basketgnn.data.ingest.duckdb_engine import prepare_log_duckdb

    return prepare_log_duckdb(path, columns, options, **engine)


def load_data(path: str | Path) -> BasketData:
    """Load what a user passed as ``--data``: a prepared dataset folder or a DNNTSP .json file."""
    path = Path(path)
    if path.is_file() and path.suffix == ".json":
        return read_dnntsp_json(path)
    if path.is_dir() and (path / "meta.json").is_file():
        return BasketData.load(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder.")
    raise UserError(
        f"{path} is neither a prepared dataset folder nor a DNNTSP .json file. "
        "Run `basketgnn prepare LOG --out FOLDER` first and pass FOLDER."
    )
