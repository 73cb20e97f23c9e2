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
7. ``last_n_baskets`` keeps each customer's last N baskets (``baskets_dropped_last_n``);
8. ``min_baskets`` / ``max_baskets`` drop customers (``customers_dropped_basket_count``).

Rows dropped by 1 or 2 are never checked for bad values: a cancelled line without a customer does
not stop the run. The one engine is DuckDB (:mod:`basketgnn.data.ingest_duckdb`), out of core.
The DNNTSP JSON splits are imported by :func:`read_dnntsp_json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from basketgnn.data.dataset import PARTS, BasketData, from_sequences
from basketgnn.errors import UserError

LOG_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")

#: Default basket-size cap of ``prepare`` and the pipeline (None: no cap). The one place to change it.
DEFAULT_MAX_BASKET_ITEMS: int | None = None


@dataclass(frozen=True)
class Columns:
    """Names of the log's columns. ``basket`` and/or ``timestamp`` must be set; ``quantity`` is
    optional (None: every row is a purchase)."""

    customer: str = "customer_id"
    item: str = "item_id"
    basket: str | None = "basket_id"
    timestamp: str | None = "timestamp"
    quantity: str | None = None


@dataclass(frozen=True)
class PrepareOptions:
    """How a log becomes a dataset; applied in the order of the module docstring."""

    min_item_baskets: int = 1
    """Drop items bought in fewer baskets than this (baskets left empty are dropped)."""
    last_n_baskets: int | None = None
    """Keep only each customer's most recent N baskets."""
    min_baskets: int = 2
    """Drop customers with fewer baskets than this (a history needs at least one plus a target)."""
    max_baskets: int | None = None
    """Drop customers with more baskets than this."""
    on_bad_rows: Literal["error", "skip"] = "error"
    """What to do with bad rows: a missing id, an unparsable timestamp, a bad quantity."""
    where: str | None = None
    """A DuckDB boolean expression over the log's columns; rows where it is not true are dropped."""
    keep_returns: bool = False
    """With a quantity column: keep rows with quantity <= 0 as ordinary rows instead of excluding them."""
    max_basket_items: int | None = DEFAULT_MAX_BASKET_ITEMS
    """Cap every basket at its N most popular items (item popularity over the whole log)."""
    time_format: str | None = None
    """strptime format of text timestamps (e.g. "%m/%d/%Y %H:%M"); None: ISO dates and times."""


def prepare_log(
    path: str | Path,
    columns: Columns = Columns(),
    options: PrepareOptions = PrepareOptions(),
    **engine: Any,
) -> BasketData:
    """Read a transaction log and build the prepared dataset, with DuckDB, out of core.

    ``engine`` takes DuckDB's settings (``memory_limit="1GB"``, ``threads=2``, ``temp_dir``; see
    :func:`basketgnn.data.ingest_duckdb.prepare_log_duckdb`). Raises :class:`UserError` with
    file, row and column for every problem a user can fix.
    """
    from basketgnn.data.ingest_duckdb import prepare_log_duckdb

    return prepare_log_duckdb(path, columns, options, **engine)


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


# Checks and messages of the ingestion engine (ingest_duckdb) and its test oracle.


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
        f"an unparsable timestamp in {column!r} (dates are read as ISO, e.g. 2024-01-31 13:45; "
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


def _check_columns(f: Path, wanted: list[str], available: list[str], columns: Columns) -> None:
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


def read_dnntsp_json(path: str | Path) -> BasketData:
    """Import a DNNTSP split file ``{"train"|"validate"|"test": {user: [[item, ...], ...]}}``.

    Item ids are kept as they are (the file's ids are already 0-based and contiguous), so
    results are comparable with published ones. Each user's part is kept as the predefined split.

    Customer ids are the file's user keys when every key is unique across the three parts (as in
    the published splits). When a key appears in more than one part (the authors' own files number
    each part's users from "user0"), those are different customers: then every customer id of the
    file is ``"<part>:<key>"`` (``"train:user0"``, ``"test:user0"``), unique and the same on every
    run, and ``meta["user_ids_prefixed_with_part"]`` is true. A key repeated within one part is
    an error (JSON keeps only the last, silently).
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(), object_pairs_hook=_unique_keys)
    except _RepeatedKey as e:
        raise UserError(
            f"{path}: the key {e.key!r} appears twice in the same object; a JSON reader would "
            "keep only the last. Give every user of a part its own key."
        ) from None
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
            f"{user_ids[too_short[0]]!r} in {PARTS[parts[too_short[0]]]!r}; every user needs a "
            "history and a target basket."
        )
    prefixed = len(set(user_ids)) < len(user_ids)
    if prefixed:
        user_ids = [f"{PARTS[p]}:{u}" for p, u in zip(parts, user_ids)]
    return BasketData(
        **{
            **data.__dict__,
            "user_ids": np.asarray(user_ids),
            "meta": {
                "source": str(path),
                "source_kind": "dnntsp-json",
                "user_ids_prefixed_with_part": prefixed,
            },
        }
    )


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` object hook that refuses a key repeated within one object."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


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
