"""Transaction logs -> :class:`BasketData`, computed out of core by DuckDB: the one ingestion
engine, behind :func:`basketgnn.data.ingest.prepare_log` (``basketgnn prepare``, the pipeline).

The raw log never has to fit in memory: DuckDB reads the files itself, and validation, basket
definition, ordering, de-duplication, filters, caps and id mapping run as SQL under
``memory_limit``, in a database file in a temporary folder (its tables compressed) that also
takes DuckDB's spill. Only the prepared arrays (int32 / int64, proportional to the result) and
the used id lists come back to Python. The order of the steps
and the report's counts are listed in :mod:`basketgnn.data.ingest`.

The pipeline, one table per step (``c`` customer code, ``i`` item code, ``bo`` basket code (the
basket id's row in ``basket_dict``), ``t`` ns since epoch, ``gb`` a basket's number in its part
in (customer, time, basket id) order, ``rfe`` a basket's rank from its customer's end)::

    raw(f, r, cust, item, basket, ts_raw, t[, w][, q_raw, q])   every row of every file
    good                                       rows kept by where / returns, without bad rows
    cust_dict, item_dict                       distinct strings -> codes in sorted-string order
    coded_rows(c, i, basket, t)                good rows with their codes (a view for one part)
    item_pop(i, pop), frequent(i)              items' basket counts over the whole log
  and for each part (a range of customer codes; tables renamed T_N while other parts run):
    basket_dict                                the part's distinct basket ids
    coded(c, i, bo, t)                         the part's rows, coded
    baskets(c, bo, t)                          a basket's time is its earliest row time
    entries(c, bo, i)                          distinct items per basket, rare items dropped,
                                               baskets capped at their most popular items
    numbered, ranked(gb, c, bo, t, size, rfe)  the baskets left, numbered
    kept(gb, c, bo, t, size, rfe)              last N per customer, min/max baskets per customer
    kept_entries(gb, i)                        the kept baskets' items, stored in (gb, i) order
  then item_map(i, ii)                         the items left, numbered densely

How values are read:

* Ids are text as the file writes them: every CSV column is read as text ("17850.0" stays
  "17850.0", "007" stays "007"). Typed Parquet id columns are spelled deterministically:
  integers and booleans as usual ("True" / "False"); a float or decimal holding a whole number
  without a fractional part (17850.0 -> "17850", the usual result of an integer id column that
  went through a float because of missing values), other floats in DuckDB's shortest round-trip
  form ("2.5"), NaN as a missing id.
* Timestamps: ISO dates and date-times, ``YYYY-MM-DD`` optionally followed by
  ``[T ]HH:MM[:SS[.fraction]]`` and an offset (``Z``, ``UTC``, ``+HH``, ``+HH:MM``, ``+HHMM``);
  values with an offset are converted to UTC, others are taken as UTC. Other spellings are
  unparsable unless ``time_format`` (a strptime format such as ``%m/%d/%Y %H:%M``) is given.
  Dates outside 1677-09-22 .. 2262-04-11 are bad rows "outside" that range. Parquet timestamp /
  date columns are used as they are (zoned ones in UTC), integer ones as ns since the epoch.
* Quantities: numbers (text in a CSV, any numeric Parquet type); a missing, non-numeric or
  non-finite quantity is a bad row.
* CSV is read strictly (RFC 4180 quoting, ``,`` separator, UTF-8, header row); a malformed line
  is reported as "cannot be read as CSV". A line holding only spaces is a row with a blank
  customer (a bad row).
* Running out of ``memory_limit`` (when even spilling cannot help) is a :class:`UserError`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest.build import PART_ROWS, build
from basketgnn.data.ingest.checks import check_basket_or_time, log_files
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.report import record_source
from basketgnn.data.ingest.sql import first_line, lit
from basketgnn.data.ingest.stage import stage
from basketgnn.data.ingest.validate import validate
from basketgnn.errors import UserError


def prepare_log_duckdb(
    path: str | Path,
    columns: Columns = Columns(),
    options: PrepareOptions = PrepareOptions(),
    memory_limit: str = "1GB",
    threads: int = 2,
    *,
    temp_dir: str | Path | None = None,
    arrays_file: str | Path | None = None,
    part_rows: int = PART_ROWS,
) -> BasketData:
    """Read a transaction log with DuckDB and build the prepared dataset, out of core.

    What :func:`basketgnn.data.ingest.prepare_log` runs; ``meta["engine"] = "duckdb"``.
    On the options they share it gives the pandas test oracle's dataset, report and messages
    (tests/support/pandas_oracle.py, which lists where they differ). ``memory_limit``
    (a DuckDB size such as "512MB") caps DuckDB's memory; the working tables live in a database
    file, and what does not fit in memory is spilled, in a temporary folder created in
    ``temp_dir`` (default: the system's temporary folder) and removed afterwards. ``threads``
    is the number of DuckDB worker threads. With ``arrays_file`` (the
    ``arrays.npz`` of a dataset folder being written), the arrays are streamed into that file
    and the dataset returned maps it: the same dataset, while Python's memory holds a batch of
    rows, not the arrays (``BasketData.save_meta`` then completes the folder). A log of more
    than ``part_rows`` valid rows is built a range of customers at a time (the same dataset;
    :mod:`.build`).
    """
    check_basket_or_time(columns)
    files = log_files(path)
    with tempfile.TemporaryDirectory(prefix="basketgnn-duckdb-", dir=temp_dir) as tmp:
        # A database file, not ":memory:": its tables are stored compressed, so the whole-log
        # tables take far less of the temporary disk than an in-memory database's spill.
        con = duckdb.connect(str(Path(tmp) / "prepare.duckdb"))
        try:
            con.execute(f"SET memory_limit = {lit(memory_limit)}")
            con.execute(f"SET temp_directory = {lit(str(Path(tmp) / 'spill'))}")
            con.execute(f"SET threads = {int(threads)}")
            # Row numbers come from WITH ORDINALITY, not from insertion order, so the order
            # guarantee (which costs memory) is not needed.
            con.execute("SET preserve_insertion_order = false")
            # Timestamps without an offset are UTC, as the pandas test oracle reads them.
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")  # a library does not draw on stdout
            _check_options(con, options)
            report: dict[str, Any] = {}
            ts_typed = stage(con, files, columns, options)
            n_rows = validate(con, path, [str(f) for f in files], columns, options, report, ts_typed)
            data = build(con, columns, options, report,
                         None if arrays_file is None else Path(arrays_file),
                         part_rows=part_rows, n_rows=n_rows)  # fmt: skip
        except duckdb.OutOfMemoryException as e:
            raise UserError(
                f"{path}: DuckDB ran out of memory (memory_limit={memory_limit}): "
                f"{first_line(e)}. Raise memory_limit or lower threads."
            ) from None
        finally:
            con.close()
    record_source(data, path, columns, options, report, engine="duckdb")
    return data


def _check_options(con: duckdb.DuckDBPyConnection, options: PrepareOptions) -> None:
    """Refuse a ``time_format`` DuckDB cannot use (the other options are checked by the model)."""
    if options.time_format is not None:
        try:
            con.execute(f"SELECT try_strptime('', {lit(options.time_format)})")
        except duckdb.Error as e:
            raise UserError(
                f"--time-format {options.time_format!r} is not a strptime format: "
                f"{first_line(e)}. Example: '%m/%d/%Y %H:%M' for 12/1/2010 8:26."
            ) from None
