"""Validation of the staged rows (table ``raw``): the rows out of scope (``where``, returns) are
counted, the bad ones in scope counted with examples, then refused or skipped; what is left is
the view ``good``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from basketgnn.data.ingest.checks import bad_rows_error, time_out_of_range, unparsable_time
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.sql import ISO_RE, lit
from basketgnn.errors import UserError

# What Python's str.strip() removes; a customer or item id made only of these is "empty".
_BLANK_RE = r"[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]*"


def validate(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    files: list[str],
    columns: Columns,
    options: PrepareOptions,
    report: dict[str, Any],
    ts_typed: list[bool],
) -> int:
    """Drop rows outside ``where`` and returns, then count bad rows, raise or drop them; the
    rows left are the view ``good``. Returns their number."""
    blank = lit(_BLANK_RE)
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
    # (condition on raw, field shown, column name, problem), in the order problems are reported.
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
    return int(n_scope - n_bad)


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
        f"(regexp_full_match({s}, {lit(ISO_RE)}) AND TRY_CAST({s} AS TIMESTAMPTZ) IS NOT NULL))"
    )
