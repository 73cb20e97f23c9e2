"""A pandas ingestion engine, kept only as a test oracle for :func:`basketgnn.data.ingest.prepare_log`
(DuckDB), on the options both understand (columns, bad rows, rare items, last N, baskets per
customer). It ignores the options only the engine has (quantity, where, basket-size cap), so
tests compare the two only on logs and options where those do nothing.

Known differences, all on input the oracle accepts and DuckDB reports as bad: non-ISO timestamps
(pandas' ``format="mixed"`` parses them), a CSV line of spaces (pandas skips it), malformed CSV
lines pandas tolerates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from basketgnn.data.dataset import NO_TIME, BasketData, _offsets
from basketgnn.data.ingest.checks import (
    bad_rows_error,
    check_basket_or_time,
    check_columns,
    log_files,
    no_customer_left,
    time_out_of_range,
    unparsable_time,
)
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.report import record_source
from basketgnn.errors import UserError

_TIME_MIN = pd.Timestamp.min.tz_localize("UTC")  # [ns] 1677-09-21 00:12:43.145224193
_TIME_MAX = pd.Timestamp.max.tz_localize("UTC")  # [ns] 2262-04-11 23:47:16.854775807


def read_log(path: str | Path, columns: Columns) -> pd.DataFrame:
    """Read the needed columns of every log file into one frame, all as strings except time.

    Adds ``_file`` (file index) and ``_row`` (1-based data row in that file) for error messages.
    """
    check_basket_or_time(columns)
    frames = []
    files = log_files(path)
    for k, f in enumerate(files):
        df = _read_one(f, columns)
        df["_file"] = np.int32(k)
        df["_row"] = np.arange(1, len(df) + 1, dtype=np.int64)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if len(df) == 0:
        raise UserError(f"{path}: the log has no rows. Check that it is the right file.")
    df.attrs["files"] = [str(f) for f in files]
    return df


def _read_one(f: Path, columns: Columns) -> pd.DataFrame:
    wanted = [c for c in (columns.customer, columns.item, columns.basket, columns.timestamp) if c]
    try:
        if f.name.lower().endswith((".parquet", ".pq")):
            import pyarrow.parquet as pq

            available = pq.read_schema(f).names
            check_columns(f, wanted, available, columns)
            df = pq.read_table(f, columns=wanted).to_pandas()
        else:
            header = pd.read_csv(f, nrows=0)
            check_columns(f, wanted, list(header.columns), columns)
            df = pd.read_csv(f, usecols=wanted, dtype=str, keep_default_na=True, engine="c")
    except UserError:
        raise
    except pd.errors.EmptyDataError:
        raise UserError(
            f"{f}: the file is empty. Remove it or pass a log with a header row."
        ) from None
    except Exception as e:  # pyarrow / parser errors: the file itself is unreadable
        raise UserError(
            f"{f}: cannot be read as {'Parquet' if f.suffix in ('.parquet', '.pq') else 'CSV'} "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). "
            "Check that the file is a valid, complete CSV or Parquet file."
        ) from None
    for c in (columns.customer, columns.item, columns.basket):
        if c and df[c].dtype != object:
            df[c] = df[c].astype("string").astype(object).where(df[c].notna(), None)
    return df


def _bad_rows(df: pd.DataFrame, mask: np.ndarray, what: str, files: list[str], column: str) -> str:
    idx = np.flatnonzero(mask)
    examples = []
    for i in idx[:3]:
        value = df[column].iloc[i] if column in df else None
        shown = " empty" if value is None else f"={value!r}"
        examples.append(
            f"{files[int(df['_file'].iloc[i])]} row {int(df['_row'].iloc[i])} ({column}{shown})"
        )
    return f"{len(idx):,} row(s) with {what}, e.g. " + "; ".join(examples)


def prepare_log_pandas(
    path: str | Path,
    columns: Columns = Columns(),
    options: PrepareOptions = PrepareOptions(),
) -> BasketData:
    """Read a transaction log and build the prepared dataset.

    Raises :class:`UserError` with file, row and column for every problem a user can fix.
    """
    df = read_log(path, columns)
    files: list[str] = df.attrs["files"]
    report: dict[str, Any] = {"rows_read": len(df)}

    bad = np.zeros(len(df), dtype=bool)
    problems = []
    for col, what in ((columns.customer, "no customer"), (columns.item, "no item")):
        m = df[col].isna().to_numpy() | (df[col].astype(str).str.strip() == "").to_numpy()
        if m.any():
            problems.append(_bad_rows(df, m, f"{what} ({col!r} empty)", files, col))
            bad |= m
    if columns.timestamp:
        raw = df[columns.timestamp]
        # format="mixed" parses each value on its own, so one odd row cannot change the others.
        parsed = pd.to_datetime(raw, errors="coerce", format="mixed", utc=True)
        m = parsed.isna().to_numpy()
        if m.any():
            problems.append(
                _bad_rows(df, m, unparsable_time(columns.timestamp), files, columns.timestamp)
            )
            bad |= m
        # pandas may parse to a coarser unit than ns and so hold dates that ns cannot.
        out = ((parsed < _TIME_MIN) | (parsed > _TIME_MAX)).to_numpy()
        if out.any():
            problems.append(
                _bad_rows(df, out, time_out_of_range(columns.timestamp), files, columns.timestamp)
            )
            bad |= out
            parsed = parsed.where(~out)
        df["_t"] = parsed.dt.tz_localize(None).astype("datetime64[ns]").astype(np.int64)
    if columns.basket:
        m = df[columns.basket].isna().to_numpy()
        if m.any():
            problems.append(
                _bad_rows(df, m, f"no basket id ({columns.basket!r} empty)", files, columns.basket)
            )
            bad |= m
    if problems:
        if options.on_bad_rows == "error":
            raise bad_rows_error(problems)
        report["rows_skipped"] = int(bad.sum())
        report["skipped_because"] = problems
        df = df.loc[~bad].reset_index(drop=True)
        if len(df) == 0:
            raise UserError(f"{path}: every row was bad and skipped; nothing is left to prepare.")

    data = _build(df, columns, options, report)
    record_source(data, path, columns, options, report)
    return data


def _build(
    df: pd.DataFrame, columns: Columns, options: PrepareOptions, report: dict[str, Any]
) -> BasketData:
    cust_codes, cust_uniques = pd.factorize(df[columns.customer], sort=True)
    item_codes, item_uniques = pd.factorize(df[columns.item], sort=True)
    cust_codes = cust_codes.astype(np.int64)
    item_codes = item_codes.astype(np.int64)

    # Basket key within the customer, and the basket's sort time.
    if columns.basket:
        basket_codes, basket_uniques = pd.factorize(df[columns.basket], sort=True)
        basket_codes = basket_codes.astype(np.int64)
        if columns.timestamp:
            t_row = df["_t"].to_numpy()
        else:
            t_row = _basket_id_order(np.asarray(basket_uniques, dtype=object))[basket_codes]
    else:
        t_row = df["_t"].to_numpy()
        basket_codes = pd.factorize(t_row, sort=True)[0].astype(np.int64)

    # Sort rows by (customer, basket time, basket, item): one lexsort, then de-duplicate.
    if columns.basket and columns.timestamp:
        # A basket's time is its earliest row time.
        key = cust_codes * (basket_codes.max() + 1) + basket_codes
        first = pd.Series(t_row).groupby(key).transform("min").to_numpy()
        t_row = first
    order = np.lexsort((item_codes, basket_codes, t_row, cust_codes))
    cust, bask, item, t = cust_codes[order], basket_codes[order], item_codes[order], t_row[order]
    new_basket = np.ones(len(order), dtype=bool)
    new_basket[1:] = (cust[1:] != cust[:-1]) | (bask[1:] != bask[:-1])
    dup = np.zeros(len(order), dtype=bool)
    dup[1:] = ~new_basket[1:] & (item[1:] == item[:-1])
    report["duplicate_items_in_basket"] = int(dup.sum())
    keep = ~dup
    cust, item, t, new_basket = cust[keep], item[keep], t[keep], new_basket[keep]
    basket_of_row = np.cumsum(new_basket) - 1  # [rows] basket number

    # Item frequency filter: number of baskets that contain the item.
    if options.min_item_baskets > 1:
        freq = np.bincount(item, minlength=len(item_uniques))
        ok = freq[item] >= options.min_item_baskets
        report["rows_dropped_rare_items"] = int((~ok).sum())
        cust, item, t, basket_of_row = cust[ok], item[ok], t[ok], basket_of_row[ok]
    # Renumber baskets densely (baskets emptied by the filter disappear).
    basket_of_row = np.unique(basket_of_row, return_inverse=True)[1]
    n_baskets = int(basket_of_row.max()) + 1 if len(basket_of_row) else 0
    basket_start = np.zeros(n_baskets, dtype=np.int64)
    basket_len = np.bincount(basket_of_row, minlength=n_baskets)
    basket_start[1:] = np.cumsum(basket_len)[:-1]
    basket_cust = cust[basket_start] if n_baskets else np.zeros(0, dtype=np.int64)
    basket_t = t[basket_start] if n_baskets else np.zeros(0, dtype=np.int64)

    # Rank of each basket within its customer, counted from the end (0 = most recent).
    per_cust = np.bincount(basket_cust, minlength=len(cust_uniques))
    cust_start = np.zeros(len(per_cust), dtype=np.int64)
    cust_start[1:] = np.cumsum(per_cust)[:-1]
    rank_from_end = per_cust[basket_cust] - 1 - (np.arange(n_baskets) - cust_start[basket_cust])
    keep_b = np.ones(n_baskets, dtype=bool)
    if options.last_n is not None:
        keep_b &= rank_from_end < options.last_n
        report["baskets_dropped_last_n"] = int((~keep_b).sum())
    kept_per_cust = np.bincount(basket_cust[keep_b], minlength=len(per_cust))
    cust_ok = kept_per_cust >= options.min_baskets
    if options.max_baskets is not None:
        cust_ok &= kept_per_cust <= options.max_baskets
    keep_b &= cust_ok[basket_cust]
    report["customers_dropped_basket_count"] = int(((kept_per_cust > 0) & ~cust_ok).sum())
    if not keep_b.any():
        raise no_customer_left(options)

    row_keep = keep_b[basket_of_row]
    item, basket_of_row = item[row_keep], basket_of_row[row_keep]
    basket_len = basket_len[keep_b]
    basket_cust, basket_t = basket_cust[keep_b], basket_t[keep_b]
    # Renumber customers and items densely over what is left, keeping their sorted order.
    used_cust, basket_user = np.unique(basket_cust, return_inverse=True)
    used_items, item_idx = np.unique(item, return_inverse=True)
    return BasketData(
        items=item_idx.astype(np.int32),
        basket_offsets=_offsets(basket_len),
        user_offsets=_offsets(np.bincount(basket_user, minlength=len(used_cust))),
        basket_times=basket_t.astype(np.int64) if columns.timestamp else
        np.full(len(basket_len), NO_TIME, dtype=np.int64),
        user_ids=np.asarray(cust_uniques, dtype=object)[used_cust].astype(str),
        item_ids=np.asarray(item_uniques, dtype=object)[used_items].astype(str),
        user_part=np.full(len(used_cust), -1, dtype=np.int8),
        meta={},
    )


def _basket_id_order(uniques: np.ndarray) -> np.ndarray:
    """Sort key of each (sorted) basket id: numeric order when all ids are numbers."""
    numeric = pd.to_numeric(pd.Series(uniques), errors="coerce")
    if numeric.notna().all():
        return np.argsort(np.argsort(numeric.to_numpy(), kind="stable"), kind="stable")
    return np.arange(len(uniques), dtype=np.int64)
