"""Staging a log's files into DuckDB's ``raw`` table (``data/ingest/stage.py``): row numbers per
file, ids as text (typed Parquet ids spelled as documented), times in ns since the epoch (UTC),
the ``where`` flag and the quantity, each row against the value worked out by hand."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.stage import _csv_header, stage
from basketgnn.errors import UserError


def ns(text: str) -> int:
    return pd.Timestamp(text).tz_convert("UTC").value if "+" in text else pd.Timestamp(text, tz="UTC").value


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute("SET TimeZone = 'UTC'")  # as the engine sets it
    yield c
    c.close()


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(
        "\ncustomer_id,basket_id,timestamp,item_id,item_id\n"  # a blank line, a repeated name
        "c1,b1,2024-01-02 10:00,x,dup\n"
        "c2,,2024-01-03T00:00:00+02:00,y,\n"
        ",b3,not a date,z,\n"
    )
    return path


@pytest.fixture
def parquet_file(tmp_path):
    path = tmp_path / "b.parquet"
    pd.DataFrame({
        "customer_id": [17850.0, 2.5, float("nan")], "basket_id": [1, 2, 3],
        "timestamp": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"]),
        "item_id": [True, False, True], "quantity": [1, -2, 3],
    }).to_parquet(path)  # fmt: skip
    return path


def test_csv_header_names_repeats_as_pandas_and_counts_blank_lines(csv_file):
    assert _csv_header(csv_file) == (["customer_id", "basket_id", "timestamp", "item_id", "item_id.1"], 1)


def test_csv_and_parquet_rows(con, csv_file, parquet_file):
    typed = stage(con, [csv_file, parquet_file], Columns(), PrepareOptions(where="customer_id IS NOT NULL"))
    assert typed == [False, True]  # per file: is its timestamp column typed
    rows = con.execute("SELECT f, r, cust, item, basket, ts_raw, t, w FROM raw ORDER BY f, r").fetchall()
    assert rows == [
        (0, 1, "c1", "x", "b1", "2024-01-02 10:00", ns("2024-01-02 10:00"), True),
        (0, 2, "c2", "y", None, "2024-01-03T00:00:00+02:00", ns("2024-01-03T00:00:00+02:00"), True),
        (0, 3, None, "z", "b3", "not a date", None, False),
        # typed Parquet: a whole float id without ".0", other floats as written, NaN missing;
        # booleans as True / False; a typed timestamp shows no raw text unless out of range
        (1, 1, "17850", "True", "1", None, ns("2024-01-01"), True),
        (1, 2, "2.5", "False", "2", None, ns("2024-01-02"), True),
        (1, 3, None, "True", "3", None, ns("2024-01-03"), False),
    ]


def test_quantity_as_text_and_number(con, parquet_file):
    stage(con, [parquet_file], Columns(quantity="quantity"), PrepareOptions())
    assert con.execute("SELECT q_raw, q FROM raw ORDER BY r").fetchall() == [("1", 1.0), ("-2", -2.0), ("3", 3.0)]


def test_time_format_reads_other_spellings(con, tmp_path):
    path = tmp_path / "us.csv"
    path.write_text("customer_id,basket_id,timestamp,item_id\nc,b,12/01/2010 08:26,x\nc,b,2010-12-01,y\n")
    stage(con, [path], Columns(), PrepareOptions(time_format="%m/%d/%Y %H:%M"))
    assert con.execute("SELECT t FROM raw ORDER BY r").fetchall() == [(ns("2010-12-01 08:26"),), (None,)]


def test_missing_column_and_unusable_where_are_user_errors(con, csv_file):
    with pytest.raises(UserError, match=r"missing column\(s\) 'qty'.*--quantity-col"):
        stage(con, [csv_file], Columns(quantity="qty"), PrepareOptions())
    with pytest.raises(UserError, match="is not a condition"):
        stage(con, [csv_file], Columns(), PrepareOptions(where="customer_id"))
