"""The prepared dataset from the validated rows (view ``good``), as SQL tables (listed in
:mod:`.duckdb_engine`), then the arrays of :class:`BasketData`:

1. :func:`code_rows`: customers and items get codes (``cust_dict``, ``item_dict``), and the
   rows are split into parts, each a range of customer codes (:func:`customer_parts`);
2. per part, :func:`code_part` and :func:`basket_entries`: baskets get codes and times, and
   each basket's distinct items are counted (duplicates counted); the items' basket counts are
   summed over the parts (``item_pop``);
3. per part, :func:`drop_rare_items`: items bought in fewer than ``min_item_baskets`` baskets
   of the whole log go;
4. :func:`cap_baskets`: a basket keeps its ``max_basket_items`` most popular items;
5. :func:`number_baskets`: the baskets left get their number ``gb`` in (customer, time, basket
   id) order and their rank from each customer's end;
6. :func:`keep_baskets`: each customer's last N baskets, customers with too few or too many;
7. :func:`kept_entries`: the kept entries in (basket, item) order; then, over all parts,
   :func:`dataset_arrays` (or :func:`stream_dataset_arrays`): items renumbered densely, the
   arrays read back part after part.

Every step adds its counts to the report. A part's steps see only its customers' rows, and
what crosses customers (the item counts of steps 3 and 4, the order of basket ids without a
timestamp, the dense item numbers) is computed over the whole log, so the arrays do not
depend on the number of parts; the sorts and hash tables of steps 2-7 then grow with a part,
not with the log, and DuckDB spills less of them. Orders (the codes, ``gb``, the entries)
come from :func:`ordered_table`: one parallel sort stored in order, a row's ``rowid`` its rank,
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


#: Rows of ``good`` per part (:func:`customer_parts`): a bigger log is built one range of
#: customers at a time. A part of this size (a million customers of the ``synth`` default shape)
#: keeps its working tables within a few GB of DuckDB memory.
PART_ROWS = 40_000_000


def build(
    con: duckdb.DuckDBPyConnection,
    columns: Columns,
    options: PrepareOptions,
    report: dict[str, Any],
    arrays_file: Path | None = None,
    *,
    part_rows: int = PART_ROWS,
    n_rows: int | None = None,
) -> BasketData:
    """The dataset of the rows in ``good`` (``n_rows`` of them; counted when None), built in
    parts of about ``part_rows`` rows (steps in the module docstring); drops ``raw`` once the
    rows are coded. With ``arrays_file``, the arrays are streamed into that ``.npz`` file and
    the dataset returned maps it (:func:`stream_dataset_arrays`): the same arrays, without
    ever holding them in memory."""
    parts, coded_rows = code_rows(con, columns, part_rows, n_rows)
    key = "bo" if columns.basket else "t"
    kinds = []  # per part: (every basket id a number, every one an integer)
    for n, (lo, hi) in enumerate(parts):
        code_part(con, columns, (lo, hi) if len(parts) > 1 else None)
        if columns.basket and not columns.timestamp:
            kinds.append(basket_id_kinds(con))
        basket_entries(con, key, report, count_items=_needs_item_counts(options))
        _drop(con, {"coded"})  # each step's input goes once used, so the file's blocks are reused
        _rename(con, ["entries", "baskets", "basket_dict"], "", f"_{n}")
    con.execute(f"DROP {coded_rows} IF EXISTS coded_rows")
    _drop(con, {"raw"})  # the strings are not needed past here
    if _needs_item_counts(options):
        item_counts(con, options.min_item_baskets)
    order = "basket" if columns.timestamp else _basket_id_order(
        all(k[0] for k in kinds), all(k[1] for k in kinds)
    )
    n_kept = 0
    for n in range(len(parts)):
        _rename(con, ["entries", "baskets", "basket_dict"], f"_{n}", "")
        filtered = drop_rare_items(con, "entries", options.min_item_baskets, report)
        capped = cap_baskets(con, filtered, key, options.max_basket_items, report)
        _drop(con, {"entries", filtered} - {capped})
        number_baskets(con, capped, key, order)
        _drop(con, {"numbered", "baskets", "basket_dict"})
        n_kept += keep_baskets(con, options, report)
        _drop(con, {"ranked", "cust_ok"})
        kept_entries(con, capped, key)
        _drop(con, {capped})
        _rename(con, ["kept", "kept_entries"], "", f"_{n}")
    if n_kept == 0:
        raise no_customer_left(options)
    item_map(con, len(parts))
    has_time = bool(columns.timestamp)
    if arrays_file is None:
        return dataset_arrays(con, has_time, len(parts))
    stream_dataset_arrays(con, has_time, arrays_file, len(parts))
    return BasketData(meta={}, **load_arrays(arrays_file))


def _needs_item_counts(options: PrepareOptions) -> bool:
    return options.min_item_baskets > 1 or options.max_basket_items is not None


def _add(report: dict[str, Any], key: str, n: Any) -> None:
    """Add a part's count to the report's."""
    report[key] = report.get(key, 0) + int(n)


def _rename(con: duckdb.DuckDBPyConnection, tables: list[str], old: str, new: str) -> None:
    """Rename each existing table ``T + old`` to ``T + new`` (a part's tables kept aside)."""
    existing = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    for table in tables:
        if table + old in existing:
            con.execute(f"ALTER TABLE {table}{old} RENAME TO {table}{new}")


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


def code_rows(
    con: duckdb.DuckDBPyConnection, columns: Columns, part_rows: int, n_rows: int | None
) -> tuple[list[tuple[int, int]], str]:
    """Tables ``cust_dict`` and ``item_dict``, and ``coded_rows(c, i[, basket], t)``, the rows
    of ``good`` with their codes: a view over ``good`` when the log is one part, else a table
    (and ``raw`` is dropped). Returns the parts (:func:`customer_parts`) and the kind of
    ``coded_rows`` ("VIEW" or "TABLE")."""
    _dictionary(con, "cust_dict", "cust", "c")
    _dictionary(con, "item_dict", "item", "i")
    if n_rows is None:
        n_rows = con.execute("SELECT count(*) FROM good").fetchall()[0][0]
    n_customers = con.execute("SELECT count(*) FROM cust_dict").fetchall()[0][0]
    parts = customer_parts(n_customers, n_rows, part_rows)
    kind = "VIEW" if len(parts) == 1 else "TABLE"
    con.execute(
        f"CREATE {kind} coded_rows AS SELECT c, i"
        + (", basket" if columns.basket else "")
        + (", t" if columns.timestamp else ", NULL::BIGINT AS t")
        + " FROM good JOIN cust_dict USING (cust) JOIN item_dict USING (item)"
    )
    if kind == "TABLE":
        _drop(con, {"raw"})  # the rows are copied with their codes
    return parts, kind


def customer_parts(n_customers: int, n_rows: int, part_rows: int) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of customer codes, as many as ``n_rows / part_rows`` rounded up (at
    most one per customer), of equal numbers of customers: the log's rows, built one range at
    a time. A customer's rows are never split between parts."""
    n_parts = max(1, min(n_customers, -(-int(n_rows) // int(part_rows))))
    per_part = max(1, -(-n_customers // n_parts))
    return [(lo, min(lo + per_part, n_customers)) for lo in range(0, max(n_customers, 1), per_part)]


def code_part(con: duckdb.DuckDBPyConnection, columns: Columns, part: tuple[int, int] | None) -> None:
    """Tables ``coded(c, i, bo, t)`` (``coded(c, i, t)`` without a basket column) and, with a
    basket column, ``basket_dict`` and ``baskets(c, bo, t)``: the rows of ``coded_rows`` whose
    customer code is in ``part`` (``[lo, hi)``; None: every row), ``bo`` a code of the basket
    id (its row in ``basket_dict``; the id itself orders a customer's baskets in
    :func:`number_baskets`), a basket's time its earliest row's."""
    # Filtering the whole table twice costs less than copying the part out of it first.
    where = "" if part is None else f" WHERE c >= {int(part[0])} AND c < {int(part[1])}"
    if not columns.basket:  # a basket is (customer, timestamp)
        con.execute(f"CREATE TABLE coded AS SELECT c, i, t FROM coded_rows{where}")
        return
    con.execute(f"CREATE TABLE basket_dict AS SELECT DISTINCT basket FROM coded_rows{where}")
    con.execute(
        "CREATE TABLE coded AS SELECT c, i, b.rowid AS bo, t FROM coded_rows "
        f"JOIN basket_dict b USING (basket){where}"
    )
    con.execute("CREATE TABLE baskets AS SELECT c, bo, min(t) AS t FROM coded GROUP BY c, bo")


def basket_id_kinds(con: duckdb.DuckDBPyConnection, table: str = "basket_dict") -> tuple[bool, bool]:
    """(every id in ``table`` (column ``basket``) is a number, every one is an integer), as
    pd.to_numeric reads them; both true for no ids."""
    all_num, all_int = con.execute(
        f"SELECT bool_and(regexp_full_match(basket, {lit(_NUMBER_RE)})), "
        f"bool_and(regexp_full_match(basket, {lit(_INT_RE)}) "
        f"AND TRY_CAST(basket AS BIGINT) IS NOT NULL) FROM {table}"
    ).fetchall()[0]
    return all_num is not False, all_int is not False


def basket_id_order(con: duckdb.DuckDBPyConnection, table: str = "basket_dict") -> str:
    """The ORDER BY of the ids in ``table`` (column ``basket``) when there is no timestamp
    (:func:`_basket_id_order` of their :func:`basket_id_kinds`)."""
    return _basket_id_order(*basket_id_kinds(con, table))


def _basket_id_order(all_num: bool, all_int: bool) -> str:
    """Numeric when every id is a number (ties, e.g. "1" and "01", by the id string), else the
    id string; as pd.to_numeric would, integers compare exactly and any non-integer makes all
    compare as floats."""
    if all_int:
        return "TRY_CAST(basket AS BIGINT), basket"
    if all_num:
        return "TRY_CAST(basket AS DOUBLE), basket"
    return "basket"


def basket_entries(
    con: duckdb.DuckDBPyConnection, key: str, report: dict[str, Any], count_items: bool = False
) -> None:
    """Table ``entries(c, key, i)``: each basket's distinct items; counts the duplicates. With
    ``count_items``, adds each item's number of baskets to the table ``item_baskets(i, n)``."""
    con.execute(f"CREATE TABLE entries AS SELECT DISTINCT c, {key}, i FROM coded")
    n_rows, n_entries = con.execute(
        "SELECT (SELECT count(*) FROM coded), (SELECT count(*) FROM entries)"
    ).fetchall()[0]
    _add(report, "duplicate_items_in_basket", n_rows - n_entries)
    if count_items:
        con.execute("CREATE TABLE IF NOT EXISTS item_baskets (i INTEGER, n BIGINT)")
        con.execute("INSERT INTO item_baskets SELECT i, count(*) FROM entries GROUP BY i")


def item_counts(con: duckdb.DuckDBPyConnection, min_item_baskets: int) -> None:
    """Tables ``item_pop(i, pop)``, each item's number of baskets in the whole log (the parts'
    counts in ``item_baskets`` summed), and ``frequent(i)``, the items held by at least
    ``min_item_baskets`` baskets. An item's count is the same after the rare-item filter,
    which removes only other items."""
    con.execute("CREATE TABLE item_pop AS SELECT i, sum(n)::BIGINT AS pop FROM item_baskets GROUP BY i")
    con.execute(f"CREATE TABLE frequent AS SELECT i FROM item_pop WHERE pop >= {int(min_item_baskets)}")
    _drop(con, {"item_baskets"})


def drop_rare_items(
    con: duckdb.DuckDBPyConnection, entries: str, min_item_baskets: int, report: dict[str, Any]
) -> str:
    """The entries of the items in ``frequent`` (:func:`item_counts`; baskets emptied here
    disappear): table ``entries2``, or ``entries`` itself when there is no such filter."""
    if min_item_baskets <= 1:
        return entries
    con.execute(f"CREATE TABLE entries2 AS SELECT * FROM {entries} SEMI JOIN frequent USING (i)")
    n_entries, n_kept = con.execute(
        f"SELECT (SELECT count(*) FROM {entries}), (SELECT count(*) FROM entries2)"
    ).fetchall()[0]
    _add(report, "rows_dropped_rare_items", n_entries - n_kept)
    return "entries2"


def cap_baskets(
    con: duckdb.DuckDBPyConnection, entries: str, key: str, cap: int | None, report: dict[str, Any]
) -> str:
    """Every basket cut to its ``cap`` most popular items (table ``capped``; ``entries`` itself
    without a cap). Popularity is the number of baskets holding the item after the rare-item
    filter (``item_pop``), ties by item code. Whole baskets are kept, so no customer loses a
    purchase occasion and histories keep their length and timing."""
    if cap is None:
        return entries
    cap = int(cap)
    con.execute(
        f"CREATE TABLE capped AS SELECT c, {key}, i FROM (SELECT c, {key}, i, row_number() OVER "
        f"(PARTITION BY c, {key} ORDER BY pop DESC, i) AS rank_in_basket FROM "
        f"{entries} JOIN item_pop USING (i)) WHERE rank_in_basket <= {cap}"
    )
    n_capped, n_dropped = con.execute(
        f"SELECT count(*), coalesce(sum(size - {cap}), 0) FROM "
        f"(SELECT count(*) AS size FROM {entries} GROUP BY c, {key}) WHERE size > {cap}"
    ).fetchall()[0]
    _add(report, "baskets_capped", n_capped)
    _add(report, "items_dropped_basket_cap", n_dropped)
    return "capped"


def number_baskets(con: duckdb.DuckDBPyConnection, entries: str, key: str, order: str) -> None:
    """Table ``ranked(gb, c, key, t, size, rfe)``: the baskets left in ``entries``, ``gb``
    numbering them in (customer, time, basket id) order (the ids in ``order``, an ORDER BY of
    column ``basket``), ``rfe`` their rank within their customer counted from the end (1 = most
    recent). A customer's baskets are consecutive in ``gb``, so ``rfe`` is the customer's first
    number plus its count minus ``gb``."""
    # The sizes first, on their own: one statement holding the aggregation, the joins and the
    # sort at once spills far more to the temporary folder.
    con.execute(f"CREATE TABLE sizes AS SELECT c, {key}, count(*) AS size FROM {entries} GROUP BY c, {key}")
    if key == "t":  # no basket column: the time is the basket
        ordered_table(con, "numbered", "SELECT c, t, size FROM sizes", "c, t")
    else:
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


def keep_baskets(con: duckdb.DuckDBPyConnection, options: PrepareOptions, report: dict[str, Any]) -> int:
    """Table ``kept``: the rows of ``ranked`` that are each customer's last ``last_n`` baskets,
    of the customers left with ``min_baskets`` .. ``max_baskets`` of them. Returns the number
    of baskets kept (:func:`build` raises when no customer of any part is left)."""
    sql = con.execute
    last_n = "TRUE" if options.last_n is None else f"rfe <= {int(options.last_n)}"
    if options.last_n is not None:
        dropped = sql(f"SELECT count(*) FROM ranked WHERE NOT ({last_n})").fetchall()[0][0]
        _add(report, "baskets_dropped_last_n", dropped)
    ok = f"n >= {int(options.min_baskets)}"
    if options.max_baskets is not None:
        ok += f" AND n <= {int(options.max_baskets)}"
    sql(
        f"CREATE TABLE cust_ok AS SELECT c, n, ({ok}) AS ok FROM "
        f"(SELECT c, count(*) FILTER (WHERE {last_n}) AS n FROM ranked GROUP BY c)"
    )
    _add(report, "customers_dropped_basket_count",
         sql("SELECT count(*) FROM cust_ok WHERE n > 0 AND NOT ok").fetchall()[0][0])  # fmt: skip
    sql(
        "CREATE TABLE kept AS SELECT * FROM ranked "
        f"SEMI JOIN (SELECT c FROM cust_ok WHERE ok) USING (c) WHERE {last_n}"
    )
    return int(sql("SELECT count(*) FROM kept").fetchall()[0][0])


def kept_entries(con: duckdb.DuckDBPyConnection, entries: str, key: str) -> None:
    """Table ``kept_entries(gb, i)``, the entries of the kept baskets stored in (basket, item)
    order (the order of the ``items`` array)."""
    ordered_table(con, "kept_entries", f"SELECT gb, i FROM {entries} JOIN kept USING (c, {key})", "gb, i")


def item_map(con: duckdb.DuckDBPyConnection, n_parts: int) -> None:
    """Table ``item_map(i, ii)``: the items left in the parts' ``kept_entries_N``, renumbered
    densely in order."""
    union = " UNION ".join(f"SELECT DISTINCT i FROM kept_entries_{n}" for n in range(n_parts))
    con.execute(
        "CREATE TABLE item_map AS SELECT i, (row_number() OVER (ORDER BY i) - 1)::INTEGER AS ii "
        f"FROM ({union})"
    )


#: The queries of the arrays, in (customer, basket) order, for part ``{n}`` (its tables
#: ``kept_{n}`` and ``kept_entries_{n}``), read with insertion order preserved (``kept_entries``
#: is stored in its order); the parts are read in order, their customers' codes increasing.
_ITEMS = "SELECT i FROM kept_entries_{n}"
_BASKET_SIZES = "SELECT size FROM kept_{n} ORDER BY gb"
_BASKETS_PER_USER = "SELECT count(*) FROM kept_{n} GROUP BY c ORDER BY c"
_BASKET_TIMES = "SELECT t FROM kept_{n} ORDER BY gb"
_USER_IDS = "SELECT cust FROM cust_dict SEMI JOIN kept_{n} USING (c) ORDER BY c"
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


def dataset_arrays(con: duckdb.DuckDBPyConnection, has_time: bool, n_parts: int = 1) -> BasketData:
    """The :class:`BasketData` of the baskets in the ``n_parts`` parts' ``kept_N`` (their items
    from ``kept_entries_N``), items renumbered densely over what is left, keeping their sorted
    order."""
    con.execute("SET preserve_insertion_order = true")  # _ITEMS reads the stored order

    def column(query: str) -> np.ndarray:
        return np.concatenate([next(iter(con.execute(query.format(n=n)).fetchnumpy().values()))
                               for n in range(n_parts)])  # fmt: skip

    items = _item_lookup(con)[column(_ITEMS)]
    basket_len = column(_BASKET_SIZES)
    per_user = column(_BASKETS_PER_USER)
    if has_time:
        basket_times = column(_BASKET_TIMES).astype(np.int64)
    else:
        basket_times = np.full(len(basket_len), NO_TIME, dtype=np.int64)
    user_ids = column(_USER_IDS)
    item_ids = next(iter(con.execute(_ITEM_IDS).fetchnumpy().values()))
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


def stream_dataset_arrays(con: duckdb.DuckDBPyConnection, has_time: bool, path: Path, n_parts: int = 1) -> None:
    """Write the arrays :func:`dataset_arrays` returns into the ``.npz`` file ``path``, batch
    by batch (:data:`STREAM_ROWS` rows of one column at a time), as ``BasketData.save`` writes
    them: memory holds a batch, whatever the number of rows; DuckDB sorts within its own
    ``memory_limit``, spilling to disk."""
    lookup = _item_lookup(con)
    n_entries = n_baskets = n_users = 0
    for n in range(n_parts):
        e, b, u = con.execute(
            f"SELECT coalesce(sum(size), 0)::BIGINT, count(*), count(DISTINCT c) FROM kept_{n}"
        ).fetchall()[0]
        n_entries, n_baskets, n_users = n_entries + e, n_baskets + b, n_users + u

    # A relation's reader keeps the ORDER BY and a table's stored order (the DB-API result's
    # reader, with insertion order not preserved, hands out batches in any order).
    con.execute("SET preserve_insertion_order = true")

    def batches(query: str, parts: int = n_parts) -> Iterator[np.ndarray]:
        for n in range(parts):
            reader = con.sql(query.format(n=n)).to_arrow_reader(STREAM_ROWS)
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
        item_ids = np.concatenate([np.asarray(b, dtype=object) for b in batches(_ITEM_IDS, 1)])
        w.whole("item_ids", np.asarray(item_ids.tolist()).astype(str))
        with w.array("user_part", np.int8, n_users) as put:
            constant(put, n_users, -1, np.int8)
