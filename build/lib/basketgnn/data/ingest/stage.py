"""Reading a log's files into DuckDB's ``raw`` table: one row per row of every file, with its file
and row number, its ids as text, its time in ns since the epoch and, with the options that need
them, the ``where`` flag and the quantity (how values are read: :mod:`.duckdb_engine`)."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import duckdb

from basketgnn.data.ingest.checks import check_columns
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.sql import ISO_RE, first_line, ident, lit
from basketgnn.errors import UserError

# The cells read as missing: pandas' default NA strings (read_csv keep_default_na=True).
_NA_STRINGS = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip


def stage(
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
                check_columns(f, wanted, list(schema), columns)
                source = f"read_parquet({lit(str(f))}, file_row_number = true)"
                row = "file_row_number + 1"
            else:
                names, skip = _csv_header(f)
                check_columns(f, wanted, names, columns)
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
                f"{f}: --where {options.where!r} fails on a row of this file: {first_line(e)}. "
                "Use TRY_CAST (NULL when a value does not convert) instead of CAST."
            ) from None
        except (duckdb.Error, OSError, UnicodeDecodeError, csv.Error) as e:
            raise _unreadable(f, e) from None
        ts_typed.append(bool(columns.timestamp) and schema[columns.timestamp] != "VARCHAR")
    return ts_typed


def _unreadable(f: Path, e: BaseException) -> UserError:
    return UserError(
        f"{f}: cannot be read as {'Parquet' if f.suffix in ('.parquet', '.pq') else 'CSV'} "
        f"({type(e).__name__}: {first_line(e)}). "
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
    rows = con.execute(f"DESCRIBE SELECT * FROM read_parquet({lit(str(f))})").fetchall()
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
    column_types = "{" + ", ".join(f"{lit(n)}: 'VARCHAR'" for n in names) + "}"
    return (
        f"read_csv({lit(str(f))}, header = true, auto_detect = false, all_varchar = true, "
        f"columns = {column_types}, delim = ',', quote = '\"', escape = '\"', "
        f"skip = {skip}, buffer_size = 8000000, null_padding = true, "
        f"nullstr = [{', '.join(lit(s) for s in _NA_STRINGS)}], "
        f"compression = {lit('gzip' if f.name.lower().endswith('.gz') else 'none')}) "
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
        col, type_ = ident(columns.timestamp), schema[columns.timestamp]
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
        col = ident(columns.quantity)
        number = f"TRY_CAST(trim(CAST({col} AS VARCHAR)) AS DOUBLE)"
        parts.append(f"CAST({col} AS VARCHAR) AS q_raw")
        parts.append(f"CASE WHEN isfinite({number}) THEN {number} END AS q")
    return ", ".join(parts)


def _as_text(name: str, schema: dict[str, str]) -> str:
    """SQL for an id column as text (see the module docstring for typed Parquet columns)."""
    col, type_ = ident(name), schema[name]
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
    col, type_ = ident(name), schema[name]
    if type_.startswith(("TIMESTAMP", "DATE")):
        # With TimeZone = UTC this gives UTC for zoned types, and NULL outside pandas' ns range.
        return f"epoch_ns(TRY_CAST({col} AS TIMESTAMP_NS))"
    if type_ in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"):
        return f"{col}::BIGINT"  # pandas reads numbers as ns since the epoch
    s = f"trim({_as_text(name, schema)})"
    if time_format is not None:
        return f"epoch_ns(try_strptime({s}, {lit(time_format)}))"
    # TIMESTAMP_NS keeps nanoseconds and pandas' date range but ignores an offset; the offset is
    # the difference between the TIMESTAMPTZ reading (applies it) and the TIMESTAMP one. The sum
    # is taken in HUGEINT: an offset can carry a time at the edge of the range past int64 (NULL).
    return (
        f"CASE WHEN regexp_full_match({s}, {lit(ISO_RE)}) THEN "
        f"TRY_CAST(epoch_ns(TRY_CAST({s} AS TIMESTAMP_NS))::HUGEINT + 1000 * "
        f"(epoch_us(TRY_CAST({s} AS TIMESTAMPTZ)) - epoch_us(TRY_CAST({s} AS TIMESTAMP))) "
        "AS BIGINT) END"
    )
