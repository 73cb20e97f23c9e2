"""The prepared dataset from the validated rows (view ``good``), as SQL tables (listed in
:mod:`.duckdb_engine`), then the arrays of :class:`BasketData`:

1. :func:`code_rows`: customers, items and baskets get codes, each basket its time;
2. :func:`basket_entries`: the distinct items of each basket (duplicates counted);
3. :func:`drop_rare_items`: items bought in fewer than ``min_item_baskets`` baskets go;
4. :func:`cap_baskets`: a basket keeps its ``max_basket_items`` most popular items;
5. :func:`number_baskets`: the baskets left get their global number ``gb`` in (customer, time,
   basket id) order and their rank from each customer's end;
6. :func:`keep_baskets`: each customer's last N baskets, customers with too few or too many;
7. :func:`dataset_arrays`: the kept entries in (basket, item) order, items renumbered densely, the
   arrays read back.

Every step adds its counts to the report. Global orders (the codes, ``gb``, the entries) come
from :func:`ordered_table`: one parallel sort stored in order, a row's ``rowid`` its rank,
where ``row_number() OVER (ORDER BY ...)`` would number the rows in one thread.
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
    _drop(con, {"raw"})  # the strings are not needed past here
    entries = basket_entries(con, key, report)
    _drop(con, {"coded"})  # each step's input goes once used, so the file's blocks are reused
    filtered = drop_rare_items(con, entries, options.min_item_baskets, report)
    capped = cap_baskets(con, filtered, key, options.max_basket_items, report)
    _drop(con, {entries, filtered} - {capped})
    number_baskets(con, capped, key, columns)
    _drop(con, {"numbered", "baskets", "basket_dict"})
    keep_baskets(con, options, report)
    _drop(con, {"ranked"})
    kept_entries(con, capped, key)
    _drop(con, {capped})
    has_time = bool(columns.timestamp)
    if arrays_file is None:
        return dataset_arrays(con, has_time)
    stream_dataset_arrays(con, has_time, arrays_file)
    return BasketData(meta={}, **load_arrays(arrays_file))


def _drop(con: duckdb.DuckDBPyConnection, tables: set[str]) -> None:
    """Drop the working ``tables`` no later step reads; the checkpoint frees their blocks of
    the database file for the next tables (else the file only grows)."""
    for table in sorted(tables):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("CHECKPOINT")


def ordered_table(con: duckdb.DuckDBPyConnection, name: str, query: str, order: str) -> None:
    """Table ``name`` of ``query``'s rows stored in ``ORDER BY order``, so that a row's
    ``rowid`` is its 0-based rank in that order (the order is kept with insertion order
    preserved for this one statement; ``query`` may order by columns it does not select)."""
    was = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
    con.execute("SET preserve_insertion_order = true")
    try:
        con.execute(f"CREATE TABLE {name} AS {query} ORDER BY {order}")
    finally:
        con.execute(f"SET preserve_insertion_order = {'true' if was else 'false'}")


def _dictionary(con: duckdb.DuckDBPyConnection, name: str, column: str, code: str) -> None:
    """Table ``name(column, code)``: the distinct values of ``good.column`` coded 0, 1, ... in
    sorted-string order (DuckDB compares VARCHAR by UTF-8 bytes, which is code point order, as
    Python's sort does)."""
    ordered_table(con, f"{name}_sorted", f"SELECT DISTINCT {column} FROM good", column)
    con.execute(f"CREATE TABLE {name} AS SELECT {column}, rowid::INTEGER AS {code} FROM {name}_sorted")
    con.execute(f"DROP TABLE {name}_sorted")


def code_rows(con: duckdb.DuckDBPyConnection, columns: Columns) -> str:
    """Tables ``cust_dict``, ``item_dict`` (and ``basket_dict``), ``coded`` and (with a basket
    column) ``baskets(c, bo, t)``; returns the column that tells a customer's baskets apart in
    ``coded``: ``bo`` (a code standing for the basket id) or, without a basket column, ``t``."""
    sql = con.execute
    _dictionary(con, "cust_dict", "cust", "c")
    _dictionary(con, "item_dict", "item", "i")
    if not columns.basket:  # a basket is (customer, timestamp)
        sql(
            "CREATE TABLE coded AS SELECT c, i, t FROM good"
            " JOIN cust_dict USING (cust) JOIN item_dict USING (item)"
        )
        return "t"
    # bo, a basket id's row in basket_dict, is any code for it: the id itself orders a
    # customer's baskets (number_baskets).
    sql("CREATE TABLE basket_dict AS SELECT DISTINCT basket FROM good")
    sql(
        "CREATE TABLE coded AS SELECT c, i, b.rowid AS bo, "
        + ("t" if columns.timestamp else "NULL::BIGINT AS t")
        + " FROM good JOIN cust_dict USING (cust) JOIN item_dict USING (item)"
        " JOIN basket_dict b USING (basket)"
    )
    sql("CREATE TABLE baskets AS SELECT c, bo, min(t) AS t FROM coded GROUP BY c, bo")
    return "bo"


def basket_id_order(con: duckdb.DuckDBPyConnection, table: str = "basket_dict") -> str:
    """The ORDER BY of the ids in ``table`` (column ``basket``) when there is no timestamp:
    numeric when every id is a number (ties, e.g. "1" and "01", by the id string), else the id
    string; as pd.to_numeric would, integers compare exactly and any non-integer makes all
    compare as floats."""
    all_num, all_int = con.execute(
        f"SELECT bool_and(regexp_full_match(basket, {lit(_NUMBER_RE)})), "
        f"bool_and(regexp_full_match(basket, {lit(_INT_RE)}) "
        f"AND TRY_CAST(basket AS BIGINT) IS NOT NULL) FROM {table}"
    ).fetchall()[0]
    if all_int:
        return "TRY_CAST(basket AS BIGINT), basket"
    if all_num:
        return "TRY_CAST(basket AS DOUBLE), basket"
    return "basket"


def basket_entries(con: duckdb.DuckDBPyConnection, key: str, report: dict[str, Any]) -> str:
    """Table ``entries(c, key, i)``: each basket's distinct items; counts the duplicates.
    Returns the table's name."""
    con.execute(f"CREATE TABLE entries AS SELECT DISTINCT c, {key}, i FROM coded")
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
    con.execute(f"CREATE TABLE entries2 AS SELECT * FROM {entries} SEMI JOIN frequent USING (i)")
    n_entries, n_kept = con.execute(
        f"SELECT (SELECT count(*) FROM {entries}), (SELECT count(*) FROM entries2)"
    ).fetchall()[0]
    report["rows_dropped_rare_items"] = int(n_entries - n_kept)
    return "entries2"


def cap_baskets(
    con: duckdb.DuckDBPyConnection, entries: str, key: str, cap: int | None, report: dict[str, Any]
) -> str:
    """Every basket cut to its ``cap`` most popular items (table ``capped``; ``entries`` itself
    without a cap). Popularity is the number of baskets holding the item after the rare-item
    filter, ties by item code. Whole baskets are kept, so no customer loses a purchase occasion
    and histories keep their length and timing."""
    if cap is None:
        return entries
    cap = int(cap)
    con.execute(
        f"CREATE TABLE capped AS SELECT c, {key}, i FROM (SELECT c, {key}, i, row_number() OVER "
        f"(PARTITION BY c, {key} ORDER BY pop DESC, i) AS rank_in_basket FROM "
        f"{entries} JOIN (SELECT i, count(*) AS pop FROM {entries} GROUP BY i) USING (i)) "
        f"WHERE rank_in_basket <= {cap}"
    )
    n_capped, n_dropped = con.execute(
        f"SELECT count(*), coalesce(sum(size - {cap}), 0) FROM "
        f"(SELECT count(*) AS size FROM {entries} GROUP BY c, {key}) WHERE size > {cap}"
    ).fetchall()[0]
    report["baskets_capped"] = int(n_capped)
    report["items_dropped_basket_cap"] = int(n_dropped)
    return "capped"


def number_baskets(con: duckdb.DuckDBPyConnection, entries: str, key: str, columns: Columns) -> None:
    """Table ``ranked(gb, c, key, t, size, rfe)``: the baskets left in ``entries``, ``gb``
    numbering them in (customer, time, basket id) order, ``rfe`` their rank within their
    customer counted from the end (1 = most recent). A customer's baskets are consecutive in
    ``gb``, so ``rfe`` is the customer's first number plus its count minus ``gb``."""
    # The sizes first, on their own: one statement holding the aggregation, the joins and the
    # sort at once spills far more to the temporary folder.
    con.execute(f"CREATE TABLE sizes AS SELECT c, {key}, count(*) AS size FROM {entries} GROUP BY c, {key}")
    if key == "t":  # no basket column: the time is the basket
        ordered_table(con, "numbered", "SELECT c, t, size FROM sizes", "c, t")
    else:
        order = "basket" if columns.timestamp else basket_id_order(con)
        ordered_table(
            con, "numbered",
            "SELECT c, bo, t, size FROM sizes JOIN baskets USING (c, bo) JOIN basket_dict b ON bo = b.rowid",
            f"c, t, {order}",
        )  # fmt: skip
    _drop(con, {"sizes"})
    keys = "n.c, n.t" if key == "t" else "n.c, n.bo, n.t"
    con.execute(
        f"CREATE TABLE ranked AS SELECT n.rowid AS gb, {keys}, n.size, f.first + f.n - n.rowid AS rfe "
        "FROM numbered n JOIN (SELECT c, min(rowid) AS first, count(*) AS n FROM numbered GROUP BY c) f "
        "USING (c)"
    )


def keep_baskets(con: duckdb.DuckDBPyConnection, options: PrepareOptions, report: dict[str, Any]) -> None:
    """Table ``kept``: the rows of ``ranked`` that are each customer's last ``last_n`` baskets,
    of the customers left with ``min_baskets`` .. ``max_baskets`` of them. Raises when no
    customer is left."""
    sql = con.execute
    last_n = "TRUE" if options.last_n is None else f"rfe <= {int(options.last_n)}"
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
        "CREATE TABLE kept AS SELECT * FROM ranked "
        f"SEMI JOIN (SELECT c FROM cust_ok WHERE ok) USING (c) WHERE {last_n}"
    )
    if sql("SELECT count(*) FROM kept").fetchall()[0][0] == 0:
        raise no_customer_left(options)


def kept_entries(con: duckdb.DuckDBPyConnection, entries: str, key: str) -> None:
    """Tables ``kept_entries(gb, i)``, the entries of the kept baskets stored in (basket, item)
    order (the order of the ``items`` array), and ``item_map(i, ii)``, the items left renumbered
    densely in order."""
    ordered_table(con, "kept_entries", f"SELECT gb, i FROM {entries} JOIN kept USING (c, {key})", "gb, i")
    con.execute(
        "CREATE TABLE item_map AS SELECT i, (row_number() OVER (ORDER BY i) - 1)::INTEGER AS ii "
        "FROM (SELECT DISTINCT i FROM kept_entries)"
    )


#: The queries of the arrays, in (customer, basket) order, read with insertion order preserved
#: (``kept_entries`` is stored in its order).
_ITEMS = "SELECT i FROM kept_entries"
_BASKET_SIZES = "SELECT size FROM kept ORDER BY gb"
_BASKETS_PER_USER = "SELECT count(*) FROM kept GROUP BY c ORDER BY c"
_BASKET_TIMES = "SELECT t FROM kept ORDER BY gb"
_USER_IDS = "SELECT cust FROM cust_dict SEMI JOIN kept USING (c) ORDER BY c"
_ITEM_IDS = "SELECT item FROM item_dict JOIN item_map USING (i) ORDER BY i"
#: Rows per batch read from DuckDB when streaming (a few MB per column).
STREAM_ROWS = 1 << 20


def _item_lookup(con: duckdb.DuckDBPyConnection) -> np.ndarray:
    """[n item codes] int32: each item code's dense number ``ii`` (-1 for the items not left)."""
    pairs = con.execute("SELECT i, ii FROM item_map").fetchnumpy()
    n_codes = con.execute("SELECT count(*) FROM item_dict").fetchall()[0][0]
    lookup = np.full(n_codes, -1, dtype=np.int32)
    lookup[pairs["i"]] = pairs["ii"]
    return lookup


def dataset_arrays(con: duckdb.DuckDBPyConnection, has_time: bool) -> BasketData:
    """The :class:`BasketData` of the baskets in ``kept`` (their items from ``kept_entries``),
    items renumbered densely over what is left, keeping their sorted order."""
    con.execute("SET preserve_insertion_order = true")  # _ITEMS reads the stored order

    def column(query: str) -> np.ndarray:
        return next(iter(con.execute(query).fetchnumpy().values()))

    items = _item_lookup(con)[column(_ITEMS)]
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


def stream_dataset_arrays(con: duckdb.DuckDBPyConnection, has_time: bool, path: Path) -> None:
    """Write the arrays :func:`dataset_arrays` returns into the ``.npz`` file ``path``, batch
    by batch (:data:`STREAM_ROWS` rows of one column at a time), as ``BasketData.save`` writes
    them: memory holds a batch, whatever the number of rows; DuckDB sorts within its own
    ``memory_limit``, spilling to disk."""
    lookup = _item_lookup(con)
    n_entries, n_baskets, n_users = con.execute(
        "SELECT coalesce(sum(size), 0)::BIGINT, count(*), count(DISTINCT c) FROM kept"
    ).fetchall()[0]

    # A relation's reader keeps the ORDER BY and a table's stored order (the DB-API result's
    # reader, with insertion order not preserved, hands out batches in any order).
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
            for values in batches(_ITEMS):
                put(lookup[values])
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
