"""Checks and messages shared by the engine and its oracle (``data/ingest/checks.py``): which
files a log is, missing columns, and the user errors, each naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from basketgnn.data.ingest.checks import (
    TIME_RANGE,
    bad_rows_error,
    check_basket_or_time,
    check_columns,
    log_files,
    no_customer_left,
    time_out_of_range,
    unparsable_time,
)
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.errors import UserError


def test_log_files_of_a_file_and_of_a_folder(tmp_path):
    for name in ("b.parquet", "a.csv", "c.CSV.GZ", "d.pq", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    assert [p.name for p in log_files(tmp_path)] == ["a.csv", "b.parquet", "c.CSV.GZ", "d.pq"]
    assert log_files(tmp_path / "a.csv") == [tmp_path / "a.csv"]


@pytest.mark.parametrize(
    ("name", "message"),
    [("missing.csv", "no such file or folder"), ("notes.txt", "not a CSV or Parquet file"),
     ("empty", "holds no .csv or .parquet files")],
)  # fmt: skip
def test_log_files_refused(tmp_path, name, message):
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=message):
        log_files(tmp_path / name)


def test_missing_columns_name_the_flags():
    columns = Columns(customer="cust", quantity="qty")
    check_columns(Path("x.csv"), ["cust", "item_id"], ["cust", "item_id"], columns)
    with pytest.raises(UserError) as e:
        check_columns(Path("x.csv"), ["cust", "qty"], ["customer", "qty2"], columns)
    assert str(e.value) == (
        "x.csv: missing column(s) 'cust', 'qty'; the file has 'customer', 'qty2'. "
        "Name the right columns (--customer-col for 'cust', --quantity-col for 'qty')."
    )


def test_basket_or_time_needed():
    check_basket_or_time(Columns(basket=None))
    check_basket_or_time(Columns(timestamp=None))
    with pytest.raises(UserError, match="--basket-col or --time-col"):
        check_basket_or_time(Columns(basket=None, timestamp=None))


def test_messages():
    assert str(bad_rows_error(["a", "b"])) == (
        "Bad rows in the log: a | b. Fix or remove these rows, or skip them with --on-bad-rows skip."
    )
    assert "not in --time-format '%d.%m.%Y'" in unparsable_time("when", "%d.%m.%Y")
    assert "read as ISO" in unparsable_time("when")
    assert f"outside {TIME_RANGE[0]} .. {TIME_RANGE[1]}" in time_out_of_range("when")
    text = str(no_customer_left(PrepareOptions(min_baskets=3, max_baskets=9)))
    assert text.startswith("No customer is left with at least 3 baskets and at most 9 after filtering.")
