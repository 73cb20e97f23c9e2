"""The dataset from the validated rows (``data/ingest/build.py``): random ``good`` rows built
into a dataset against a plain-Python reference of every step (codes, basket order and time,
de-duplication, rare items, the basket cap, last N, baskets per customer), report included."""

from __future__ import annotations

from collections import Counter, defaultdict

import duckdb
import numpy as np
import pytest

from basketgnn.data.dataset import NO_TIME
from basketgnn.data.ingest.build import (
    PART_ROWS,
    basket_id_order,
    build,
    customer_parts,
    ordered_table,
)
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.errors import UserError


def _rows(seed: int) -> list[tuple[str, str, str, int]]:
    """(customer, item, basket, t) rows: baskets whose rows share a time or not (the basket's
    time is its earliest), items repeated within a basket, a popular head and a rare tail."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(60):
        cust, t0 = f"c{rng.integers(8)}", int(rng.integers(0, 500)) * 10
        for _ in range(int(rng.integers(1, 7))):
            item = f"i{min(rng.geometric(0.25), 15):02d}"
            rows.append((cust, item, f"b{b:03d}", t0 + int(rng.integers(0, 3))))
    return rows


def _reference(rows, options: PrepareOptions) -> tuple[dict[str, list[tuple[int, list[str]]]], dict[str, int]]:
    """Each customer's baskets in order (time, sorted item ids) and the report's counts."""
    time, items = {}, defaultdict(set)
    for cust, item, basket, t in rows:
        time[cust, basket] = min(t, time.get((cust, basket), t))
        items[cust, basket].add(item)
    report = {"duplicate_items_in_basket": len(rows) - sum(map(len, items.values()))}
    if options.min_item_baskets > 1:
        held = Counter(i for s in items.values() for i in s)
        before = sum(map(len, items.values()))
        items = {k: {i for i in s if held[i] >= options.min_item_baskets} for k, s in items.items()}
        report["rows_dropped_rare_items"] = before - sum(map(len, items.values()))
        items = {k: s for k, s in items.items() if s}
    if options.max_basket_items is not None:
        cap, pop = options.max_basket_items, Counter(i for s in items.values() for i in s)
        report["baskets_capped"] = sum(len(s) > cap for s in items.values())
        report["items_dropped_basket_cap"] = sum(max(len(s) - cap, 0) for s in items.values())
        items = {k: set(sorted(s, key=lambda i: (-pop[i], i))[:cap]) for k, s in items.items()}
    history = defaultdict(list)
    for cust, basket in sorted(items, key=lambda k: (k[0], time[k], k[1])):
        history[cust].append((time[cust, basket], sorted(items[cust, basket])))
    if options.last_n is not None:
        report["baskets_dropped_last_n"] = sum(max(len(h) - options.last_n, 0) for h in history.values())
        history = {c: h[-options.last_n :] for c, h in history.items()}
    ok = {c: h for c, h in history.items()
          if options.min_baskets <= len(h) <= (options.max_baskets or len(h))}  # fmt: skip
    report["customers_dropped_basket_count"] = len(history) - len(ok)
    return ok, report


def _build(rows, columns: Columns, options: PrepareOptions, part_rows: int = PART_ROWS):
    con = duckdb.connect()
    con.execute("CREATE TABLE raw AS SELECT 1 AS x")  # build drops it once the rows are coded
    con.execute("CREATE TABLE good (cust VARCHAR, item VARCHAR, basket VARCHAR, t BIGINT)")
    con.executemany("INSERT INTO good VALUES (?, ?, ?, ?)", rows)
    report: dict = {}
    data = build(con, columns, options, report, part_rows=part_rows)
    return data, report


# One part; 6 parts of 1-2 customers; a part per customer (8 customers, ~200 rows).
@pytest.mark.parametrize("part_rows", [PART_ROWS, 40, 7])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "options",
    [PrepareOptions(), PrepareOptions(min_item_baskets=4), PrepareOptions(max_basket_items=2),
     PrepareOptions(last_n=3, max_baskets=6), PrepareOptions(min_item_baskets=3, max_basket_items=3,
     last_n=5, min_baskets=3)],
)  # fmt: skip
def test_dataset_equals_the_reference(seed, options, part_rows):
    rows = _rows(seed)
    data, report = _build(rows, Columns(), options, part_rows)
    data.validate()
    expected, expected_report = _reference(rows, options)
    got = {
        str(data.user_ids[u]): [
            (int(data.basket_times[data.user_offsets[u] + k]), sorted(data.item_ids[b].tolist()))
            for k, b in enumerate(data.user_baskets(u))
        ]
        for u in range(data.n_users)
    }
    assert got == expected
    assert report == expected_report
    assert list(data.user_ids) == sorted(expected) and list(data.item_ids) == sorted(data.item_ids)
    assert data.items.dtype == np.int32 and data.basket_times.dtype == np.int64


def test_without_timestamp_baskets_follow_their_ids_numerically():
    rows = [("c", "x", "10", 0), ("c", "y", "9", 0), ("c", "z", "100", 0), ("c", "x", "9", 0)]
    data, _ = _build(rows, Columns(timestamp=None), PrepareOptions())
    assert [sorted(data.item_ids[b].tolist()) for b in data.user_baskets(0)] == [["x", "y"], ["x"], ["z"]]
    assert (data.basket_times == NO_TIME).all()


@pytest.mark.parametrize("part_rows", [PART_ROWS, 1])
def test_without_timestamp_the_basket_id_order_is_the_whole_logs(part_rows):
    """Customer "a" has integer ids only, "b" a text one: every id compares as text, whether
    the two customers are built in one part or in two."""
    rows = [("a", "x", "10", 0), ("a", "y", "9", 0), ("b", "x", "k2", 0), ("b", "y", "k1", 0)]
    data, _ = _build(rows, Columns(timestamp=None), PrepareOptions(), part_rows)
    assert [data.item_ids[b].tolist() for b in data.user_baskets(0)] == [["x"], ["y"]]
    assert [data.item_ids[b].tolist() for b in data.user_baskets(1)] == [["y"], ["x"]]


@pytest.mark.parametrize(
    ("n_customers", "n_rows", "part_rows", "parts"),
    [(5, 100, 1000, [(0, 5)]), (5, 100, 40, [(0, 2), (2, 4), (4, 5)]), (3, 100, 1, [(0, 1), (1, 2), (2, 3)]),
     (0, 0, 10, [(0, 0)])],
)  # fmt: skip
def test_customer_parts_cover_every_customer_once(n_customers, n_rows, part_rows, parts):
    assert customer_parts(n_customers, n_rows, part_rows) == parts


@pytest.mark.parametrize(
    ("ids", "order"),
    [(["3", "01", "1"], "TRY_CAST(basket AS BIGINT), basket"),
     (["2.5", "1e1", "-1"], "TRY_CAST(basket AS DOUBLE), basket"),
     (["1_000", "20"], "basket"), (["b2", "10"], "basket")],
)  # fmt: skip
def test_basket_id_order(ids, order):
    con = duckdb.connect()
    con.execute("CREATE TABLE basket_ids (basket VARCHAR)")
    con.executemany("INSERT INTO basket_ids VALUES (?)", [(i,) for i in ids])
    assert basket_id_order(con, "basket_ids") == order


@pytest.mark.parametrize("part_rows", [PART_ROWS, 7])
def test_no_customer_left_is_a_user_error(part_rows):
    with pytest.raises(UserError, match="No customer is left with at least 5 baskets"):
        _build(_rows(0), Columns(), PrepareOptions(min_baskets=5, last_n=4), part_rows)


def test_ordered_table_rowid_is_the_rank_in_parallel(tmp_path):
    """Several threads, a table spread over many row groups, insertion order otherwise off (as
    prepare runs): each row's rowid is its rank in the ORDER BY, and the setting comes back."""
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    con.execute("SET threads = 4")
    con.execute("SET preserve_insertion_order = false")
    con.execute("CREATE TABLE src AS SELECT (i * 7919) % 300007 AS a, (i % 13)::VARCHAR AS s FROM range(300007) t(i)")
    ordered_table(con, "out", "SELECT a FROM src", "s, a")
    ranks = con.execute(
        "SELECT count(*) FILTER (WHERE o.rowid <> r.rank), count(*) FROM out o JOIN "
        "(SELECT a, row_number() OVER (ORDER BY s, a) - 1 AS rank FROM src) r USING (a)"
    ).fetchall()[0]
    assert ranks == (0, 300007)
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0] is False
