"""Transaction logs (CSV / Parquet, a file or a folder) -> :class:`BasketData`.

One row of a log is one item bought by one customer in one basket. A basket is identified by a
basket-id column, or by (customer, timestamp) when there is none. Baskets are ordered by time
(their earliest timestamp) or, without a timestamp column, by basket id (numerically when every
id is a number). Items are de-duplicated within a basket; a quantity column is accepted and
ignored for membership. The DNNTSP JSON splits are imported by :func:`read_dnntsp_json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from basketgnn.data.dataset import NO_TIME, PARTS, BasketData, _offsets, from_sequences
from basketgnn.errors import UserError

LOG_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")


@dataclass(frozen=True)
class Columns:
    """Names of the log's columns. ``basket`` and/or ``timestamp`` must be set."""

    customer: str = "customer_id"
    item: str = "item_id"
    basket: str | None = "basket_id"
    timestamp: str | None = "timestamp"
    quantity: str | None = "quantity"


@dataclass(frozen=True)
class PrepareOptions:
    """Filters applied after reading, in this order: item frequency, last N, baskets per customer."""

    min_item_baskets: int = 1
    """Drop items bought in fewer baskets than this (baskets left empty are dropped)."""
    last_n_baskets: int | None = None
    """Keep only each customer's most recent N baskets."""
    min_baskets: int = 2
    """Drop customers with fewer baskets than this (a history needs at least one plus a target)."""
    max_baskets: int | None = None
    """Drop customers with more baskets than this."""
    on_bad_rows: Literal["error", "skip"] = "error"
    """What to do with rows missing a customer/item or with an unparsable timestamp."""


# Checks and messages shared by both ingestion engines (pandas here, DuckDB in ingest_duckdb).


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
_TIME_MIN = pd.Timestamp.min.tz_localize("UTC")  # [ns] 1677-09-21 00:12:43.145224193
_TIME_MAX = pd.Timestamp.max.tz_localize("UTC")  # [ns] 2262-04-11 23:47:16.854775807


def unparsable_time(column: str) -> str:
    """The bad-rows problem of timestamps that cannot be read as a date."""
    return f"an unparsable timestamp in {column!r}"


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
            _check_columns(f, wanted, available, columns)
            df = pq.read_table(f, columns=wanted).to_pandas()
        else:
            header = pd.read_csv(f, nrows=0)
            _check_columns(f, wanted, list(header.columns), columns)
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


def _check_columns(f: Path, wanted: list[str], available: list[str], columns: Columns) -> None:
    missing = [c for c in wanted if c not in available]
    if missing:
        flags = {
            columns.customer: "--customer-col",
            columns.item: "--item-col",
            columns.basket: "--basket-col",
            columns.timestamp: "--time-col",
        }
        fixes = ", ".join(f"{flags[c]} for {c!r}" for c in missing)
        raise UserError(
            f"{f}: missing column(s) {', '.join(repr(c) for c in missing)}; the file has "
            f"{', '.join(repr(c) for c in available)}. Name the right columns ({fixes})."
        )


def _bad_rows(df: pd.DataFrame, mask: np.ndarray, what: str, files: list[str], column: str) -> str:
    idx = np.flatnonzero(mask)
    examples = []
    for i in idx[:3]:
        value = df[column].iloc[i] if column in df else None
        examples.append(
            f"{files[int(df['_file'].iloc[i])]} row {int(df['_row'].iloc[i])} ({column}={value!r})"
        )
    return f"{len(idx)} row(s) with {what}, e.g. " + "; ".join(examples)


def prepare_log(
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
        columns=asdict(columns),
        options=asdict(options),
        report=report,
        **extra,
    )


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
    if options.last_n_baskets is not None:
        keep_b &= rank_from_end < options.last_n_baskets
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


def read_dnntsp_json(path: str | Path) -> BasketData:
    """Import a DNNTSP split file ``{"train"|"validate"|"test": {user: [[item, ...], ...]}}``.

    Item ids are kept as they are (the file's ids are already 0-based and contiguous), so
    results are comparable with published ones. Each user's part is kept as the predefined split.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot be read as DNNTSP JSON ({e}).") from None
    if not isinstance(raw, dict) or not set(PARTS) <= set(raw):
        raise UserError(
            f"{path}: a DNNTSP file needs the keys {', '.join(PARTS)} at the top level; "
            f"found {', '.join(map(str, raw)) if isinstance(raw, dict) else type(raw).__name__}."
        )
    sequences: list[list[list[int]]] = []
    user_ids: list[str] = []
    parts: list[int] = []
    for code, part in enumerate(PARTS):
        if not isinstance(raw[part], dict):
            raise UserError(f"{path}: {part!r} must map user ids to lists of baskets.")
        for user, baskets in raw[part].items():
            if not isinstance(baskets, list) or not all(
                isinstance(b, list) and all(isinstance(i, int) and i >= 0 for i in b)
                for b in baskets
            ):
                raise UserError(
                    f"{path}: user {user!r} in {part!r} is not a list of baskets of "
                    "non-negative integer item ids."
                )
            sequences.append(baskets)
            user_ids.append(str(user))
            parts.append(code)
    max_item = max((max(b) for s in sequences for b in s if b), default=-1)
    data = from_sequences(sequences, n_items=max_item + 1, user_part=np.asarray(parts, np.int8))
    too_short = np.flatnonzero(data.n_baskets_per_user < 2)
    if len(too_short):
        raise UserError(
            f"{path}: {len(too_short)} user(s) have fewer than 2 non-empty baskets, e.g. "
            f"{user_ids[too_short[0]]!r}; every user needs a history and a target basket."
        )
    return BasketData(
        **{
            **data.__dict__,
            "user_ids": np.asarray(user_ids),
            "meta": {"source": str(path), "source_kind": "dnntsp-json"},
        }
    )


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
