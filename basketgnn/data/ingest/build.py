"""The prepared dataset from the validated rows (view ``good``), as SQL tables (listed in
:mod:`.duckdb_engine`), then the arrays of :class:`BasketData`:

1. :func:`code_rows`: customers, items and baskets get codes; each basket its time and its global
   number ``gb`` in (customer, time, basket id) order;
2. :func:`basket_entries`: the distinct items of each basket (duplicates counted);
3. :func:`drop_rare_items`: items bought in fewer than ``min_item_baskets`` baskets go;
4. :func:`cap_baskets`: a basket keeps its ``max_basket_items`` most popular items;
5. :func:`keep_baskets`: each customer's last N baskets, customers with too few or too many;
6. :func:`dataset_arrays`: items renumbered densely, the arrays read back.

Every step adds its counts to the report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from basketgnn.data.arrays_file import ArraysWriter, load_arrays
from basketgnn.data.dataset import NO_TIME, BasketData, _offsets
from basketgnn.data.ingest.checks import no_customer_left
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.sql import lit

# Basket ids pd.to_numeric accepts: decimal numbers and infinities (DuckDB's cast also takes
# "1_000" and hexadecimal, which pandas does not).
_NUMBER_RE = r"(?i)\s*[+-]?((\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?|inf|infinity)\s*"
_INT_RE = r"\s*[+-]?\d+\s*"


def build(
    con: duckdb.DuckDBPyConnection,
    columns: Columns,
    options: PrepareOptions,
    report: dict[str, Any],
    arrays_file: Path | None = None,
) -> BasketData:
    """The dataset of the rows in ``good`` (steps in the module docstring); drops ``raw`` once
    the rows are coded. With ``arrays_file``, the arrays are streamed into that ``.npz`` file
    and the dataset returned maps it (:func:`stream_dataset_arrays`): the same arrays, without
    ever holding them in memory."""
    key = code_rows(con, columns)
    con.execute("DROP TABLE raw")  # the strings are not needed past here; frees memory / spill space
    entries = basket_entries(con, key, report)
    entries = drop_rare_items(con, entries, options.min_item_baskets, report)
    entries = cap_baskets(con, entries, options.max_basket_items, report)
    keep_baskets(con, entries, options, report)
    has_time = bool(columns.timestamp)
    if arrays_file is None:
        return dataset_arrays(con, entries, has_time)
    stream_dataset_arrays(con, entries, has_time, arrays_file)
    return BasketData(meta={}, **load_arrays(arrays_file))


def code_rows(con: duckdb.DuckDBPyConnection, columns: Columns) -> str:
    """Tables ``cust_dict``, ``item_dict`` (and ``basket_dict``), ``coded`` and ``baskets``;
    returns the column that tells a customer's baskets apart in ``coded``: ``bo`` (the basket
    id's order) or, without a basket column, ``t``."""
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
    if not columns.basket:  # a basket is (customer, timestamp)
        sql(
            "CREATE TABLE coded AS SELECT c, i, t FROM good"
            " JOIN cust_dict USING (cust) JOIN item_dict USING (item)"
        )
        sql(
            "CREATE TABLE baskets AS SELECT c, t, row_number() OVER (ORDER BY c, t) - 1 AS gb "
            "FROM (SELECT DISTINCT c, t FROM coded)"
        )
        return "t"
    sql("CREATE TABLE basket_ids AS SELECT DISTINCT basket FROM good")
    order = "basket" if columns.timestamp else basket_id_order(con)
    sql(
        f"CREATE TABLE basket_dict AS SELECT basket, row_number() OVER (ORDER BY {order}) "
        "AS bo FROM basket_ids"
    )
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
    return "bo"


def basket_id_order(con: duckdb.DuckDBPyConnection) -> str:
    """The ORDER BY of the ids in ``basket_ids`` when there is no timestamp: numeric when every
    id is a number (ties, e.g. "1" and "01", by the id string), else the id string; as
    pd.to_numeric would, integers compare exactly and any non-integer makes all compare as
    floats."""
    all_num, all_int = con.execute(
        f"SELECT bool_and(regexp_full_match(basket, {lit(_NUMBER_RE)})), "
        f"bool_and(regexp_full_match(basket, {lit(_INT_RE)}) "
        "AND TRY_CAST(basket AS BIGINT) IS NOT NULL) FROM basket_ids"
    ).fetchall()[0]
    if all_int:
        return "TRY_CAST(basket AS BIGINT), basket"
    if all_num:
        return "TRY_CAST(basket AS DOUBLE), basket"
    return "basket"


def basket_entries(con: duckdb.DuckDBPyConnection, key: str, report: dict[str, Any]) -> str:
    """Table ``entries(gb, i)``: each basket's distinct items; counts the duplicates. Returns
    the table's name."""
    # De-duplicate, then join: a join feeding an aggregation holds both in memory at once.
    con.execute(
        f"CREATE TABLE entries AS SELECT gb, i FROM (SELECT DISTINCT c, {key}, i FROM coded) "
        f"JOIN baskets USING (c, {key})"
    )
    n_rows, n_entries = con.execute(
        "SELECT (SELECT count(*) FROM coded), (SELECT count(*) FROM entries)"
    ).fetchall()[0]
    report["duplicate_items_in_basket"] = int(n_rows - n_entries)
    return "entries"


def drop_rare_items(
    con: duckdb.DuckDBPyConnection, entries: str, min_item_baskets: int, report: dict[str, Any]
) -> str:
    """The entries of items held by at least ``min_item_baskets`` baskets (baskets emptied here
    disappear): table ``entries2``, or ``entries`` itself when there is no such filter."""
    if min_item_baskets <= 1:
        return entries
    con.execute(
        f"CREATE TABLE frequent AS SELECT i FROM {entries} GROUP BY i "
        f"HAVING count(*) >= {int(min_item_baskets)}"
    )
    con.execute(f"CREATE TABLE entries2 AS SELECT gb, i FROM {entries} SEMI JOIN frequent USING (i)")
    n_entries, n_kept = con.execute(
        f"SELECT (SELECT count(*) FROM {entries}), (SELECT count(*) FROM entries2)"
    ).fetchall()[0]
    report["rows_dropped_rare_items"] = int(n_entries - n_kept)
    return "entries2"


def cap_baskets(
    con: duckdb.DuckDBPyConnection, entries: str, cap: int | None, report: dict[str, Any]
) -> str:
    """Every basket cut to its ``cap`` most popular items (table ``capped``; ``entries`` itself
    without a cap). Popularity is the number of baskets holding the item after the rare-item
    filter, ties by item code. Whole baskets are kept, so no customer loses a purchase occasion
    and histories keep their length and timing."""
    if cap is None:
        return entries
    cap = int(cap)
    con.execute(
        "CREATE TABLE capped AS SELECT gb, i FROM (SELECT gb, i, row_number() OVER "
        "(PARTITION BY gb ORDER BY pop DESC, i) AS rank_in_basket FROM "
        f"{entries} JOIN (SELECT i, count(*) AS pop FROM {entries} GROUP BY i) USING (i)) "
        f"WHERE rank_in_basket <= {cap}"
    )
    n_capped, n_dropped = con.execute(
        f"SELECT count(*), coalesce(sum(size - {cap}), 0) FROM "
        f"(SELECT count(*) AS size FROM {entries} GROUP BY gb) WHERE size > {cap}"
    ).fetchall()[0]
    report["baskets_capped"] = int(n_capped)
    report["items_dropped_basket_cap"] = int(n_dropped)
    return "capped"


def keep_baskets(
    con: duckdb.DuckDBPyConnection, entries: str, options: PrepareOptions, report: dict[str, Any]
) -> None:
    """Table ``kept(gb, c, t, size)``: each customer's last ``last_n`` baskets, of the customers
    left with ``min_baskets`` .. ``max_baskets`` of them. Raises when no customer is left."""
    sql = con.execute
    # rfe = rank of the basket within its customer counted from the end (1 = most recent).
    last_n = "TRUE" if options.last_n is None else f"rfe <= {int(options.last_n)}"
    sql(
        "CREATE TABLE ranked AS SELECT gb, c, t, size, "
        "row_number() OVER (PARTITION BY c ORDER BY gb DESC) AS rfe "
        f"FROM (SELECT gb, count(*) AS size FROM {entries} GROUP BY gb) JOIN baskets USING (gb)"
    )
    if options.last_n is not None:
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


#: The queries of the arrays, in (customer, basket) order; ``{entries}`` is the entries table.
_ITEMS = "SELECT ii FROM {entries} JOIN kept USING (gb) JOIN item_map USING (i) ORDER BY gb, ii"
_BASKET_SIZES = "SELECT size FROM kept ORDER BY gb"
_BASKETS_PER_USER = "SELECT count(*) FROM kept GROUP BY c ORDER BY c"
_BASKET_TIMES = "SELECT t FROM kept ORDER BY gb"
_USER_IDS = "SELECT cust FROM cust_dict SEMI JOIN kept USING (c) ORDER BY c"
_ITEM_IDS = "SELECT item FROM item_dict JOIN item_map USING (i) ORDER BY i"
#: Rows per batch read from DuckDB when streaming (a few MB per column).
STREAM_ROWS = 1 << 20


def _map_items(con: duckdb.DuckDBPyConnection, entries: str) -> None:
    """Table ``item_map(i, ii)``: the items left in kept baskets renumbered densely, in order."""
    con.execute(
        "CREATE TABLE item_map AS SELECT i, (row_number() OVER (ORDER BY i) - 1)::INTEGER AS ii "
        f"FROM (SELECT DISTINCT i FROM {entries} SEMI JOIN kept USING (gb))"
    )


def dataset_arrays(con: duckdb.DuckDBPyConnection, entries: str, has_time: bool) -> BasketData:
    """The :class:`BasketData` of the baskets in ``kept`` (their items from ``entries``), items
    renumbered densely over what is left, keeping their sorted order."""
    _map_items(con, entries)

    def column(query: str) -> np.ndarray:
        return next(iter(con.execute(query).fetchnumpy().values()))

    items = column(_ITEMS.format(entries=entries))
    basket_len = column(_BASKET_SIZES)
    per_user = column(_BASKETS_PER_USER)
    if has_time:
        basket_times = column(_BASKET_TIMES).astype(np.int64)
    else:
        basket_times = np.full(len(basket_len), NO_TIME, dtype=np.int64)
    user_ids = column(_USER_IDS)
    item_ids = column(_ITEM_IDS)
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


def stream_dataset_arrays(
    con: duckdb.DuckDBPyConnection, entries: str, has_time: bool, path: Path
) -> None:
    """Write the arrays :func:`dataset_arrays` returns into the ``.npz`` file ``path``, batch
    by batch (:data:`STREAM_ROWS` rows of one column at a time), as ``BasketData.save`` writes
    them: memory holds a batch, whatever the number of rows; DuckDB sorts within its own
    ``memory_limit``, spilling to disk."""
    _map_items(con, entries)
    n_entries, n_baskets, n_users = con.execute(
        "SELECT coalesce(sum(size), 0)::BIGINT, count(*), count(DISTINCT c) FROM kept"
    ).fetchall()[0]

    # A relation's reader keeps the ORDER BY (the DB-API result's reader, with insertion
    # order not preserved, hands out sorted batches in any order).
    con.execute("SET preserve_insertion_order = true")

    def batches(query: str) -> Iterator[np.ndarray]:
        reader = con.sql(query).to_arrow_reader(STREAM_ROWS)
        for batch in reader:
            yield batch.column(0).to_numpy(zero_copy_only=False)

    def offsets(put: Callable[[Any], None], query: str) -> None:
        put(np.zeros(1, np.int64))
        total = 0
        for lengths in batches(query):
            ends = np.cumsum(lengths, dtype=np.int64) + total
            put(ends)
            total = int(ends[-1]) if len(ends) else total

    def constant(put: Callable[[Any], None], n: int, value: Any, dtype: Any) -> None:
        for start in range(0, n, STREAM_ROWS):
            put(np.full(min(STREAM_ROWS, n - start), value, dtype=dtype))

    width = max((int(pc.max(pc.utf8_length(pa.array(ids))).as_py() or 0)
                 for ids in batches(_USER_IDS)), default=0)  # fmt: skip
    with ArraysWriter(path) as w:
        with w.array("items", np.int32, n_entries) as put:
            for values in batches(_ITEMS.format(entries=entries)):
                put(values)
        with w.array("basket_offsets", np.int64, n_baskets + 1) as put:
            offsets(put, _BASKET_SIZES)
        with w.array("user_offsets", np.int64, n_users + 1) as put:
            offsets(put, _BASKETS_PER_USER)
        with w.array("basket_times", np.int64, n_baskets) as put:
            if has_time:
                for values in batches(_BASKET_TIMES):
                    put(values)
            else:
                constant(put, n_baskets, NO_TIME, np.int64)
        with w.array("user_ids", f"<U{max(width, 1)}", n_users) as put:
            for ids in batches(_USER_IDS):
                put(ids)
        item_ids = np.concatenate([np.asarray(b, dtype=object) for b in batches(_ITEM_IDS)])
        w.whole("item_ids", np.asarray(item_ids.tolist()).astype(str))
        with w.array("user_part", np.int8, n_users) as put:
            constant(put, n_users, -1, np.int8)
