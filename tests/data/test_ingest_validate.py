"""Validation of the staged rows (``data/ingest/validate.py``) on a hand-made ``raw`` table:
what is out of scope (``where``, returns) is counted and never checked, bad rows in scope are
counted with examples and refused or skipped, and ``good`` holds exactly the rows left."""

from __future__ import annotations

import duckdb
import pytest

from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.validate import validate
from basketgnn.errors import UserError

COLUMNS = Columns(quantity="qty")
# f, r, cust, item, basket, ts_raw, t, w (kept by where), q_raw, q
RAW = [
    (0, 1, "c1", "x", "b1", "2024-01-01", 1, True, "1", 1.0),
    (0, 2, "c1", "y", "b1", "2024-01-01", 1, True, "-1", -1.0),  # a return
    (0, 3, None, "y", "b2", "2024-01-02", 2, True, "2", 2.0),  # no customer
    (0, 4, "c2", "POST", "b3", "2024-01-02", 2, False, "1", 1.0),  # dropped by where
    (1, 1, None, "POST", None, "junk", None, False, None, None),  # out of scope: not checked
    (1, 2, "c2", " ", "b4", "2024-01-03", 3, True, "1", 1.0),  # a blank item
    (1, 3, "c2", "z", "b4", "junk", None, True, "x", None),  # bad time and bad quantity
    (1, 4, "c3", "z", "b5", "2024-01-04", 4, True, "1", 1.0),
]
FILES = ["a.csv", "b.csv"]


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute(
        "CREATE TABLE raw (f INTEGER, r BIGINT, cust VARCHAR, item VARCHAR, basket VARCHAR, "
        "ts_raw VARCHAR, t BIGINT, w BOOLEAN, q_raw VARCHAR, q DOUBLE)"
    )
    c.executemany("INSERT INTO raw VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", RAW)
    yield c
    c.close()


def test_bad_rows_in_scope_are_refused_with_examples(con):
    report: dict = {}
    with pytest.raises(UserError) as e:
        validate(con, "log", FILES, COLUMNS, PrepareOptions(where="w"), report, [False, False])
    text = str(e.value)
    assert "1 row(s) with no customer ('customer_id' empty), e.g. a.csv row 3 (customer_id empty)" in text
    assert "1 row(s) with no item ('item_id' empty), e.g. b.csv row 2 (item_id=' ')" in text
    assert "1 row(s) with an unparsable timestamp in 'timestamp'" in text and "b.csv row 3 (timestamp='junk')" in text
    assert "1 row(s) with a missing or non-numeric quantity in 'qty', e.g. b.csv row 3 (qty='x')" in text
    assert "row 1 (" not in text.split("b.csv")[1]  # b.csv row 1 is out of scope
    assert report == {"rows_read": 8, "rows_dropped_where": 2, "returns_excluded": 1}


def test_skipped_bad_rows_leave_the_good_ones(con):
    report: dict = {}
    validate(con, "log", FILES, COLUMNS, PrepareOptions(where="w", on_bad_rows="skip"), report, [False, False])
    assert report["rows_skipped"] == 3 and len(report["skipped_because"]) == 4
    assert con.execute("SELECT f, r FROM good ORDER BY f, r").fetchall() == [(0, 1), (1, 4)]


def test_returns_kept_are_counted_and_stay(con):
    report: dict = {}
    options = PrepareOptions(where="w", on_bad_rows="skip", keep_returns=True)
    validate(con, "log", FILES, COLUMNS, options, report, [False, False])
    assert report["returns_kept"] == 1 and "returns_excluded" not in report
    assert con.execute("SELECT f, r FROM good ORDER BY f, r").fetchall() == [(0, 1), (0, 2), (1, 4)]


def test_nothing_in_scope_is_an_error(con):
    """A return dropped by where is counted by where alone."""
    con.execute("UPDATE raw SET w = FALSE")
    with pytest.raises(UserError, match=r"no row is left to prepare \(8 rows dropped where, 0 returns excluded of 8 read\)"):
        validate(con, "log", FILES, COLUMNS, PrepareOptions(where="w"), {}, [False, False])
