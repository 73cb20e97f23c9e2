"""Transaction logs -> :class:`BasketData`, computed out of core by DuckDB: the one ingestion
engine, behind :func:`basketgnn.data.ingest.prepare_log` (``basketgnn prepare``, the pipeline).

The raw log never has to fit in memory: DuckDB reads the files itself, and validation, basket
definition, ordering, de-duplication, filters, caps and id mapping run as SQL under
``memory_limit``, spilling to a temporary folder. Only the prepared arrays (int32 / int64,
proportional to the result) and the used id lists come back to Python. The order of the steps
and the report's counts are listed in :mod:`basketgnn.data.ingest`.

The pipeline, one table per step (``c`` customer code, ``i`` item code, ``bo`` basket-id order
key, ``t`` ns since epoch, ``gb`` global basket number in (customer, time, basket id) order)::

    raw(f, r, cust, item, basket, ts_raw, t[, w][, q_raw, q])   every row of every file
    good                                       rows kept by where / returns, without bad rows
    cust_dict, item_dict, basket_dict          distinct strings -> codes in sorted-string order
    coded(c, i, bo, t)                         good rows, coded
    baskets(c, bo, t, gb)                      a basket's time is its earliest row time
    entries(gb, i)                             distinct items per basket, rare items dropped,
                                               baskets capped at their most popular items
    kept(gb, c, t, size)                       last N per customer, min/max baskets per customer

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

import csv
import gzip
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from basketgnn.data.dataset import NO_TIME, BasketData, _offsets
from basketgnn.data.ingest import (
    Columns,
    PrepareOptions,
    _check_columns,
    bad_rows_error,
    check_basket_or_time,
    log_files,
    no_customer_left,
    record_source,
    time_out_of_range,
    unparsable_time,
)
from basketgnn.errors import UserError

# pandas' default NA strings (read_csv keep_default_na=True), as basketgnn has always read them.
_NA_STRINGS = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip
# What Python's str.strip() removes; a customer or item id made only of these is "empty".
_BLANK_RE = r"[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]*"
# The timestamp strings accepted (see the module docstring); DuckDB's cast does the parsing, this
# keeps out what it would read differently from pandas ("epoch", time zone names).
_ISO_RE = (
    r"\d{4}-\d{1,2}-\d{1,2}"
    r"([T ]+\d{1,2}(:\d{1,2}(:\d{1,2}(\.\d+)?)?)?)?"
    r"\s*(Z|UTC|[+-]\d{2}(:?\d{2})?)?"
)
# Basket ids pd.to_numeric accepts: decimal numbers and infinities (DuckDB's cast also takes
# "1_000" and hexadecimal, which pandas does not).
_NUMBER_RE = r"(?i)\s*[+-]?((\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?|inf|infinity)\s*"
_INT_RE = r"\s*[+-]?\d+\s*"


def prepare_log_duckdb(
    path: str | Path,
    columns: Columns = Columns(),
    options: PrepareOptions = PrepareOptions(),
    memory_limit: str = "1GB",
    threads: int = 2,
    *,
    temp_dir: str | Path | None = None,
) -> BasketData:
    """Read a transaction log with DuckDB and build the prepared dataset, out of core.

    What :func:`basketgnn.data.ingest.prepare_log` runs; ``meta["engine"] = "duckdb"``.
    On the options they share it gives the pandas test oracle's dataset, report and messages
    (tests/data/pandas_oracle.py, which lists where they differ). ``memory_limit``
    (a DuckDB size such as "512MB") caps DuckDB's memory; what does not fit is spilled to a
    temporary folder created in ``temp_dir`` (default: the system's temporary folder) and removed
    afterwards. ``threads`` is the number of DuckDB worker threads.
    """
    check_basket_or_time(columns)
    files = log_files(path)
    with tempfile.TemporaryDirectory(prefix="basketgnn-duckdb-", dir=temp_dir) as tmp:
        con = duckdb.connect(":memory:")
        try:
            con.execute(f"SET memory_limit = {_lit(memory_limit)}")
            con.execute(f"SET temp_directory = {_lit(str(Path(tmp) / 'spill'))}")
            con.execute(f"SET threads = {int(threads)}")
            # Row numbers come from WITH ORDINALITY, not from insertion order, so the order
            # guarantee (which costs memory) is not needed.
            con.execute("SET preserve_insertion_order = false")
            # Timestamps without an offset are UTC, as in the pandas path.
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")  # a library does not draw on stdout
            _check_options(con, options)
            report: dict[str, Any] = {}
            ts_typed = _stage(con, files, columns, options)
            _validate(con, path, [str(f) for f in files], columns, options, report, ts_typed)
            data = _build(con, columns, options, report)
        except duckdb.OutOfMemoryException as e:
            raise UserError(
                f"{path}: DuckDB ran out of memory (memory_limit={memory_limit}): "
                f"{_first_line(e)}. Raise memory_limit or lower threads."
            ) from None
        finally:
            con.close()
    record_source(data, path, columns, options, report, engine="duckdb")
    return data


def _check_options(con: duckdb.DuckDBPyConnection, options: PrepareOptions) -> None:
    if options.max_basket_items is not None and options.max_basket_items < 1:
        raise UserError(
            f"--max-basket-items must be at least 1, not {options.max_basket_items} "
            "(leave it out for no cap)."
        )
    if options.time_format is not None:
        try:
            con.execute(f"SELECT try_strptime('', {_lit(options.time_format)})")
        except duckdb.Error as e:
            raise UserError(
                f"--time-format {options.time_format!r} is not a strptime format: "
                f"{_first_line(e)}. Example: '%m/%d/%Y %H:%M' for 12/1/2010 8:26."
            ) from None


# --- reading -------------------------------------------------------------------------------


def _stage(
    con: duckdb.DuckDBPyConnection, files: list[Path], columns: Columns, options: PrepareOptions
) -> list[bool]:
    """Load every file into ``raw``; returns, per file, whether its timestamp column is typed."""
    wanted = [
        c
        for c in (columns.customer, columns.item, columns.basket, columns.timestamp,
                  columns.quantity)
        if c
    ]  # fmt: skip
    ts_typed = []
    for k, f in enumerate(files):
        is_parquet = f.name.lower().endswith((".parquet", ".pq"))
        try:
            if is_parquet:
                schema = _parquet_schema(con, f)
                _check_columns(f, wanted, list(schema), columns)
                source = f"read_parquet({_lit(str(f))}, file_row_number = true)"
                row = "file_row_number + 1"
            else:
                names, skip = _csv_header(f)
                _check_columns(f, wanted, names, columns)
                schema = dict.fromkeys(names, "VARCHAR")
                source = _read_csv_sql(f, names, skip)
                row = "ordinality"
            if options.where is not None:
                _check_where(con, f, source, list(schema), options.where)
            select = _stage_select(k, row, schema, columns, options)
            verb = "CREATE TABLE raw AS" if k == 0 else "INSERT INTO raw"
            con.execute(f"{verb} SELECT {select} FROM {source}")
        except UserError:
            raise
        except duckdb.OutOfMemoryException:
            raise
        except duckdb.ConversionException as e:
            if options.where is None:
                raise _unreadable(f, e) from None
            raise UserError(
                f"{f}: --where {options.where!r} fails on a row of this file: {_first_line(e)}. "
                "Use TRY_CAST (NULL when a value does not convert) instead of CAST."
            ) from None
        except (duckdb.Error, OSError, UnicodeDecodeError, csv.Error) as e:
            raise _unreadable(f, e) from None
        ts_typed.append(bool(columns.timestamp) and schema[columns.timestamp] != "VARCHAR")
    return ts_typed


def _unreadable(f: Path, e: BaseException) -> UserError:
    return UserError(
        f"{f}: cannot be read as {'Parquet' if f.suffix in ('.parquet', '.pq') else 'CSV'} "
        f"({type(e).__name__}: {_first_line(e)}). "
        "Check that the file is a valid, complete CSV or Parquet file."
    )


def _check_where(
    con: duckdb.DuckDBPyConnection, f: Path, source: str, names: list[str], where: str
) -> None:
    """Refuse a ``where`` that DuckDB cannot bind on this file or that is not a condition."""
    hint = (
        f"Write a true/false DuckDB expression over the columns of {f.name} "
        f"({', '.join(names)}), e.g. \"StockCode NOT IN ('POST', 'M')\""
        + ("; every column of a CSV file is text: compare with quoted values or convert with "
           "TRY_CAST(col AS DOUBLE)." if not f.name.lower().endswith((".parquet", ".pq")) else ".")
    )  # fmt: skip
    try:
        rows = con.execute(f"DESCRIBE SELECT ({where}) AS w FROM {source}").fetchall()
    except duckdb.Error as e:
        message = " ".join(str(e).split())
        raise UserError(f"{f}: --where {where!r} is not usable: {message}. {hint}") from None
    if len(rows) != 1 or str(rows[0][1]) != "BOOLEAN":
        got = ", ".join(str(r[1]) for r in rows)
        raise UserError(
            f"{f}: --where {where!r} is not a condition (it gives {got}, not BOOLEAN). {hint}"
        )


def _parquet_schema(con: duckdb.DuckDBPyConnection, f: Path) -> dict[str, str]:
    rows = con.execute(f"DESCRIBE SELECT * FROM read_parquet({_lit(str(f))})").fetchall()
    return {name: str(type_) for name, type_, *_ in rows}


def _csv_header(f: Path) -> tuple[list[str], int]:
    """Column names of a CSV file as pandas names them (``a``, ``a.1`` for repeats), and the
    number of blank lines before them (pandas skips those)."""
    opener = gzip.open if f.name.lower().endswith(".gz") else open
    skip = 0
    with opener(f, "rt", encoding="utf-8-sig", newline="") as fh:
        for header in csv.reader(fh):
            if len(header) > 1 or (header and header[0].strip()):
                break
            skip += 1
        else:
            raise UserError(f"{f}: the file is empty. Remove it or pass a log with a header row.")
    names: list[str] = []
    for h in header:
        name, n = h, 0
        while name in names:
            n += 1
            name = f"{h}.{n}"
        names.append(name)
    return names, skip


def _read_csv_sql(f: Path, names: list[str], skip: int) -> str:
    # Everything is given explicitly (no sniffing) so that DuckDB splits the file as pandas'
    # read_csv does: header row, "," separator, '"' quoting, missing trailing fields as nulls.
    # The default 32 MB read buffer (one per thread) alone would fill a small memory_limit.
    column_types = "{" + ", ".join(f"{_lit(n)}: 'VARCHAR'" for n in names) + "}"
    return (
        f"read_csv({_lit(str(f))}, header = true, auto_detect = false, all_varchar = true, "
        f"columns = {column_types}, delim = ',', quote = '\"', escape = '\"', "
        f"skip = {skip}, buffer_size = 8000000, null_padding = true, "
        f"nullstr = [{', '.join(_lit(s) for s in _NA_STRINGS)}], "
        f"compression = {_lit('gzip' if f.name.lower().endswith('.gz') else 'none')}) "
        "WITH ORDINALITY"
    )


def _stage_select(
    k: int, row: str, schema: dict[str, str], columns: Columns, options: PrepareOptions
) -> str:
    parts = [f"{k}::INTEGER AS f", f"{row}::BIGINT AS r"]
    parts.append(f"{_as_text(columns.customer, schema)} AS cust")
    parts.append(f"{_as_text(columns.item, schema)} AS item")
    if columns.basket:
        parts.append(f"{_as_text(columns.basket, schema)} AS basket")
    if columns.timestamp:
        col, type_ = _ident(columns.timestamp), schema[columns.timestamp]
        if type_ == "VARCHAR":
            ts_raw = col
        elif type_.startswith(("TIMESTAMP", "DATE")):  # shown only when out of range
            ts_raw = (
                f"CASE WHEN TRY_CAST({col} AS TIMESTAMP_NS) IS NULL THEN CAST({col} AS VARCHAR) END"
            )
        else:
            ts_raw = "NULL::VARCHAR"
        parts.append(f"{ts_raw} AS ts_raw")
        parts.append(f"({_time_ns(columns.timestamp, schema, options.time_format)})::BIGINT AS t")
    if options.where is not None:
        parts.append(f"coalesce(({options.where}), FALSE) AS w")
    if columns.quantity:
        col = _ident(columns.quantity)
        number = f"TRY_CAST(trim(CAST({col} AS VARCHAR)) AS DOUBLE)"
        parts.append(f"CAST({col} AS VARCHAR) AS q_raw")
        parts.append(f"CASE WHEN isfinite({number}) THEN {number} END AS q")
    return ", ".join(parts)


def _as_text(name: str, schema: dict[str, str]) -> str:
    """SQL for an id column as text (see the module docstring for typed Parquet columns)."""
    col, type_ = _ident(name), schema[name]
    if type_ == "VARCHAR":
        return col
    if type_ == "BOOLEAN":
        return f"CASE WHEN {col} THEN 'True' WHEN NOT {col} THEN 'False' END"
    if type_ in ("FLOAT", "DOUBLE"):
        return (
            f"CASE WHEN isnan({col}) THEN NULL "
            f"WHEN isfinite({col}) AND {col} = trunc({col}) AND abs({col}) < 1e18 "
            f"THEN CAST(CAST({col} AS BIGINT) AS VARCHAR) ELSE CAST({col} AS VARCHAR) END"
        )
    if type_.startswith("DECIMAL"):
        return (
            f"CASE WHEN {col} = trunc({col}) THEN CAST(CAST({col} AS HUGEINT) AS VARCHAR) "
            f"ELSE CAST({col} AS VARCHAR) END"
        )
    return f"CAST({col} AS VARCHAR)"


def _time_ns(name: str, schema: dict[str, str], time_format: str | None = None) -> str:
    """SQL for the row time in ns since the epoch (UTC); NULL when missing or unparsable."""
    col, type_ = _ident(name), schema[name]
    if type_.startswith(("TIMESTAMP", "DATE")):
        # With TimeZone = UTC this gives UTC for zoned types, and NULL outside pandas' ns range.
        return f"epoch_ns(TRY_CAST({col} AS TIMESTAMP_NS))"
    if type_ in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"):
        return f"{col}::BIGINT"  # pandas reads numbers as ns since the epoch
    s = f"trim({_as_text(name, schema)})"
    if time_format is not None:
        return f"epoch_ns(try_strptime({s}, {_lit(time_format)}))"
    # TIMESTAMP_NS keeps nanoseconds and pandas' date range but ignores an offset; the offset is
    # the difference between the TIMESTAMPTZ reading (applies it) and the TIMESTAMP one. The sum
    # is taken in HUGEINT: an offset can carry a time at the edge of the range past int64 (NULL).
    return (
        f"CASE WHEN regexp_full_match({s}, {_lit(_ISO_RE)}) THEN "
        f"TRY_CAST(epoch_ns(TRY_CAST({s} AS TIMESTAMP_NS))::HUGEINT + 1000 * "
        f"(epoch_us(TRY_CAST({s} AS TIMESTAMPTZ)) - epoch_us(TRY_CAST({s} AS TIMESTAMP))) "
        "AS BIGINT) END"
    )


def _time_out_of_range(ts_typed: list[bool], iso_text: bool = True) -> str:
    """SQL condition on ``raw``: a time that parses but lies outside pandas' ns range.
    ``iso_text``: text times are read as ISO (no ``time_format``), so an ISO value can be out of
    range; with a format, a text value that does not parse is unparsable."""
    typed = [str(f) for f, is_typed in enumerate(ts_typed) if is_typed]
    # A typed value's ts_raw is set only when it is out of range; a text one parses as a
    # TIMESTAMPTZ (whose range is far wider) but not within the ns range (t is NULL).
    s = "trim(ts_raw)"
    in_typed_file = f"f IN ({', '.join(typed)})" if typed else "FALSE"
    if not iso_text:
        return f"t IS NULL AND ts_raw IS NOT NULL AND {in_typed_file}"
    return (
        f"t IS NULL AND ts_raw IS NOT NULL AND ({in_typed_file} OR "
        f"(regexp_full_match({s}, {_lit(_ISO_RE)}) AND TRY_CAST({s} AS TIMESTAMPTZ) IS NOT NULL))"
    )


# --- validation ----------------------------------------------------------------------------


def _validate(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    files: list[str],
    columns: Columns,
    options: PrepareOptions,
    report: dict[str, Any],
    ts_typed: list[bool],
) -> None:
    """Drop rows outside ``where`` and returns, then count bad rows, raise or drop them; the
    rows left are the view ``good``."""
    blank = _lit(_BLANK_RE)
    # Rows in scope: kept by where, and not a return to exclude. Out-of-scope rows are not checked.
    scope_parts, counted = [], []
    if options.where is not None:
        scope_parts.append("w")
        counted.append(("rows_dropped_where", "NOT w"))
    if columns.quantity:
        is_return = "q <= 0" + (" AND w" if options.where is not None else "")
        if options.keep_returns:
            counted.append(("returns_kept", is_return))
        else:
            scope_parts.append("coalesce(NOT q <= 0, TRUE)")
            counted.append(("returns_excluded", is_return))
    scope = " AND ".join(scope_parts) or "TRUE"
    # (condition on raw, field shown, column name, problem), in the order prepare_log checks.
    checks = [
        (f"cust IS NULL OR regexp_full_match(cust, {blank})", "cust", columns.customer,
         f"no customer ({columns.customer!r} empty)"),
        (f"item IS NULL OR regexp_full_match(item, {blank})", "item", columns.item,
         f"no item ({columns.item!r} empty)"),
    ]  # fmt: skip
    if columns.timestamp:
        out_of_range = _time_out_of_range(ts_typed, iso_text=options.time_format is None)
        checks.append((f"t IS NULL AND NOT coalesce({out_of_range}, FALSE)", "ts_raw",
                       columns.timestamp,
                       unparsable_time(columns.timestamp, options.time_format)))  # fmt: skip
        checks.append((out_of_range, "ts_raw", columns.timestamp,
                       time_out_of_range(columns.timestamp)))  # fmt: skip
    if columns.basket:
        checks.append(("basket IS NULL", "basket", columns.basket,
                       f"no basket id ({columns.basket!r} empty)"))  # fmt: skip
    if columns.quantity:
        checks.append(("q IS NULL", "q_raw", columns.quantity,
                       f"a missing or non-numeric quantity in {columns.quantity!r}"))  # fmt: skip
    bad = " OR ".join(f"({cond})" for cond, *_ in checks)
    counts = con.execute(
        "SELECT count(*), "
        + "".join(f"count(*) FILTER (WHERE {cond}), " for _, cond in counted)
        + f"count(*) FILTER (WHERE {scope}), "
        + "".join(f"count(*) FILTER (WHERE ({scope}) AND ({cond})), " for cond, *_ in checks)
        + f"count(*) FILTER (WHERE ({scope}) AND ({bad})) FROM raw"
    ).fetchall()[0]
    n_rows, n_counted = counts[0], counts[1 : 1 + len(counted)]
    n_scope, per_check, n_bad = counts[1 + len(counted)], counts[2 + len(counted) : -1], counts[-1]
    if n_rows == 0:
        raise UserError(f"{path}: the log has no rows. Check that it is the right file.")
    report["rows_read"] = int(n_rows)
    for (key, _), n in zip(counted, n_counted):
        report[key] = int(n)
    if n_scope == 0:
        dropped = [f"{n:,} {key.replace('_', ' ')}" for (key, _), n in zip(counted, n_counted)]
        raise UserError(
            f"{path}: no row is left to prepare ({', '.join(dropped)} of {n_rows:,} read). "
            "Check --where, and --quantity-col (or keep returns with --keep-returns)."
        )

    problems = []
    for (cond, field, column, what), n in zip(checks, per_check):
        if not n:
            continue
        examples = []
        for f, r, value in con.execute(
            f"SELECT f, r, {field} FROM raw WHERE ({scope}) AND ({cond}) ORDER BY f, r LIMIT 3"
        ).fetchall():
            if value is None and field == "ts_raw":
                shown = "=NaT" if ts_typed[f] else "=nan"  # what pandas shows for a null there
            elif value is None:
                shown = " empty"  # an empty CSV cell or a null: not Python's "None"
            else:
                shown = f"={value!r}"
            examples.append(f"{files[f]} row {r} ({column}{shown})")
        problems.append(f"{n:,} row(s) with {what}, e.g. " + "; ".join(examples))
    if problems:
        if options.on_bad_rows == "error":
            raise bad_rows_error(problems)
        report["rows_skipped"] = int(n_bad)
        report["skipped_because"] = problems
        if n_bad == n_scope:
            raise UserError(f"{path}: every row was bad and skipped; nothing is left to prepare.")
        con.execute(f"CREATE VIEW good AS SELECT * FROM raw WHERE ({scope}) AND NOT ({bad})")
    else:
        con.execute(f"CREATE VIEW good AS SELECT * FROM raw WHERE {scope}")


# --- the dataset ---------------------------------------------------------------------------


def _build(
    con: duckdb.DuckDBPyConnection,
    columns: Columns,
    options: PrepareOptions,
    report: dict[str, Any],
) -> BasketData:
    sql = con.execute
    # Codes in sorted-string order (DuckDB compares VARCHAR by UTF-8 bytes, which is code point
    # order, as Python's sort does).
    sql(
        "CREATE TABLE cust_dict AS SELECT cust, (row_number() OVER (ORDER BY cust) - 1)::INTEGER"
        " AS c FROM (SELECT DISTINCT cust FROM good)"
    )
    sql(
        "CREATE TABLE item_dict AS SELECT item, (row_number() OVER (ORDER BY item) - 1)::INTEGER"
        " AS i FROM (SELECT DISTINCT item FROM good)"
    )
    if columns.basket:
        sql("CREATE TABLE basket_ids AS SELECT DISTINCT basket FROM good")
        # Without a timestamp, baskets are ordered numerically when every id is a number (ties,
        # e.g. "1" and "01", by the id string), else by the id string; as pd.to_numeric would,
        # integers compare exactly and any non-integer makes all compare as floats.
        order = "basket"
        if not columns.timestamp:
            all_num, all_int = sql(
                f"SELECT bool_and(regexp_full_match(basket, {_lit(_NUMBER_RE)})), "
                f"bool_and(regexp_full_match(basket, {_lit(_INT_RE)}) "
                "AND TRY_CAST(basket AS BIGINT) IS NOT NULL) FROM basket_ids"
            ).fetchall()[0]
            if all_int:
                order = "TRY_CAST(basket AS BIGINT), basket"
            elif all_num:
                order = "TRY_CAST(basket AS DOUBLE), basket"
        sql(
            f"CREATE TABLE basket_dict AS SELECT basket, row_number() OVER (ORDER BY {order}) "
            "AS bo FROM basket_ids"
        )
        key = "bo"
        sql(
            "CREATE TABLE coded AS SELECT c, i, bo, "
            + ("t" if columns.timestamp else "NULL::BIGINT AS t")
            + " FROM good JOIN cust_dict USING (cust) JOIN item_dict USING (item)"
            " JOIN basket_dict USING (basket)"
        )
        sql(
            "CREATE TABLE baskets AS SELECT c, bo, min(t) AS t, "
            "row_number() OVER (ORDER BY c, min(t), bo) - 1 AS gb FROM coded GROUP BY c, bo"
        )
    else:
        key = "t"  # a basket is (customer, timestamp)
        sql(
            "CREATE TABLE coded AS SELECT c, i, t FROM good"
            " JOIN cust_dict USING (cust) JOIN item_dict USING (item)"
        )
        sql(
            "CREATE TABLE baskets AS SELECT c, t, row_number() OVER (ORDER BY c, t) - 1 AS gb "
            "FROM (SELECT DISTINCT c, t FROM coded)"
        )
    sql("DROP TABLE raw")  # the strings are no longer needed; frees memory / spill space
    # De-duplicate before joining: a join feeding an aggregation holds both in memory at once.
    sql(
        f"CREATE TABLE entries AS SELECT gb, i FROM (SELECT DISTINCT c, {key}, i FROM coded) "
        f"JOIN baskets USING (c, {key})"
    )
    n_rows, n_entries = sql(
        "SELECT (SELECT count(*) FROM coded), (SELECT count(*) FROM entries)"
    ).fetchall()[0]
    report["duplicate_items_in_basket"] = int(n_rows - n_entries)

    # Item frequency = number of baskets holding the item; baskets emptied here disappear.
    if options.min_item_baskets > 1:
        sql(
            "CREATE TABLE frequent AS SELECT i FROM entries GROUP BY i "
            f"HAVING count(*) >= {int(options.min_item_baskets)}"
        )
        sql("CREATE TABLE entries2 AS SELECT gb, i FROM entries SEMI JOIN frequent USING (i)")
        n_kept = sql("SELECT count(*) FROM entries2").fetchall()[0][0]
        report["rows_dropped_rare_items"] = int(n_entries - n_kept)
        entries = "entries2"
    else:
        entries = "entries"

    # The basket cap keeps a basket's N most popular items: popularity = number of baskets holding
    # the item (after the rare-item filter), ties by item id. Whole baskets are kept, so no
    # customer loses a purchase occasion and histories keep their length and timing.
    if options.max_basket_items is not None:
        cap = int(options.max_basket_items)
        sql(
            "CREATE TABLE capped AS SELECT gb, i FROM (SELECT gb, i, row_number() OVER "
            "(PARTITION BY gb ORDER BY pop DESC, i) AS rank_in_basket FROM "
            f"{entries} JOIN (SELECT i, count(*) AS pop FROM {entries} GROUP BY i) USING (i)) "
            f"WHERE rank_in_basket <= {cap}"
        )
        n_capped, n_dropped = sql(
            f"SELECT count(*), coalesce(sum(size - {cap}), 0) FROM "
            f"(SELECT count(*) AS size FROM {entries} GROUP BY gb) WHERE size > {cap}"
        ).fetchall()[0]
        report["baskets_capped"] = int(n_capped)
        report["items_dropped_basket_cap"] = int(n_dropped)
        entries = "capped"

    # rfe = rank of the basket within its customer counted from the end (1 = most recent).
    last_n = "TRUE" if options.last_n_baskets is None else f"rfe <= {int(options.last_n_baskets)}"
    sql(
        "CREATE TABLE ranked AS SELECT gb, c, t, size, "
        "row_number() OVER (PARTITION BY c ORDER BY gb DESC) AS rfe "
        f"FROM (SELECT gb, count(*) AS size FROM {entries} GROUP BY gb) JOIN baskets USING (gb)"
    )
    if options.last_n_baskets is not None:
        report["baskets_dropped_last_n"] = int(
            sql(f"SELECT count(*) FROM ranked WHERE NOT ({last_n})").fetchall()[0][0]
        )
    ok = f"n >= {int(options.min_baskets)}"
    if options.max_baskets is not None:
        ok += f" AND n <= {int(options.max_baskets)}"
    sql(
        f"CREATE TABLE cust_ok AS SELECT c, n, ({ok}) AS ok FROM "
        f"(SELECT c, count(*) FILTER (WHERE {last_n}) AS n FROM ranked GROUP BY c)"
    )
    report["customers_dropped_basket_count"] = int(
        sql("SELECT count(*) FROM cust_ok WHERE n > 0 AND NOT ok").fetchall()[0][0]
    )
    sql(
        "CREATE TABLE kept AS SELECT gb, c, t, size FROM ranked "
        f"SEMI JOIN (SELECT c FROM cust_ok WHERE ok) USING (c) WHERE {last_n}"
    )
    if sql("SELECT count(*) FROM kept").fetchall()[0][0] == 0:
        raise no_customer_left(options)

    # Items renumbered densely over what is left, keeping their sorted order.
    sql(
        "CREATE TABLE item_map AS SELECT i, (row_number() OVER (ORDER BY i) - 1)::INTEGER AS ii "
        f"FROM (SELECT DISTINCT i FROM {entries} SEMI JOIN kept USING (gb))"
    )

    def column(query: str) -> np.ndarray:
        return next(iter(sql(query).fetchnumpy().values()))

    items = column(
        f"SELECT ii FROM {entries} JOIN kept USING (gb) JOIN item_map USING (i) ORDER BY gb, ii"
    )
    basket_len = column("SELECT size FROM kept ORDER BY gb")
    per_user = column("SELECT count(*) FROM kept GROUP BY c ORDER BY c")
    if columns.timestamp:
        basket_times = column("SELECT t FROM kept ORDER BY gb").astype(np.int64)
    else:
        basket_times = np.full(len(basket_len), NO_TIME, dtype=np.int64)
    user_ids = column("SELECT cust FROM cust_dict SEMI JOIN kept USING (c) ORDER BY c")
    item_ids = column("SELECT item FROM item_dict JOIN item_map USING (i) ORDER BY i")
    return BasketData(
        items=items.astype(np.int32),
        basket_offsets=_offsets(basket_len.astype(np.int64)),
        user_offsets=_offsets(per_user.astype(np.int64)),
        basket_times=basket_times,
        user_ids=np.asarray(user_ids.tolist()).astype(str),
        item_ids=np.asarray(item_ids.tolist()).astype(str),
        user_part=np.full(len(per_user), -1, dtype=np.int8),
        meta={},
    )


# --- SQL text ------------------------------------------------------------------------------


def _lit(s: str) -> str:
    """A SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


def _ident(name: str) -> str:
    """A quoted SQL identifier (column names may hold any character)."""
    return '"' + name.replace('"', '""') + '"'


def _first_line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else ""
