"""The ingestion options (``data/ingest/options.py``): the models themselves (names, defaults,
checks, descriptions), then what the options of a real export do: returns (quantity), ``where``,
ids as the file writes them, the basket-size and last-N caps, and non-ISO timestamps. Each case
is a tiny log whose expected baskets and counts are worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log, report_lines
from basketgnn.data.ingest.options import option_error
from basketgnn.errors import UserError
from tests.support.ingest import EXPORT, EXPORT_COLUMNS, EXPORT_ROWS, baskets_by_id, write_csv

# --- the models ------------------------------------------------------------------------------


def test_defaults_are_the_documented_ones():
    assert PrepareOptions().model_dump() == {
        "min_item_baskets": 1, "last_n": None, "min_baskets": 2, "max_baskets": None,
        "on_bad_rows": "error", "where": None, "keep_returns": False, "max_basket_items": None,
        "time_format": None,
    }  # fmt: skip
    assert Columns().model_dump() == {
        "customer": "customer_id", "item": "item_id", "basket": "basket_id",
        "timestamp": "timestamp", "quantity": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    "values",
    [
        {"last_n_baskets": 3},  # not a field: the name a user writes is last_n
        {"min_baskets": 1},  # a customer needs a history and a target
        {"min_item_baskets": 0},
        {"last_n": 0},
        {"max_baskets": 1},
        {"max_basket_items": 0},
        {"on_bad_rows": "ignore"},
        {"keep_returns": "maybe"},
    ],
)
def test_options_outside_their_range_are_refused(values):
    with pytest.raises(ValidationError, match=next(iter(values))):
        PrepareOptions(**values)


def test_columns_refuse_unknown_names_and_are_frozen():
    with pytest.raises(ValidationError, match="customer_col"):
        Columns(customer_col="c")
    with pytest.raises(ValidationError, match="frozen"):
        Columns().item = "sku"  # type: ignore[misc]
    assert Columns(basket=None) == Columns(basket=None) and Columns(basket=None) != Columns()


@pytest.mark.parametrize("model", [Columns, PrepareOptions])
def test_every_field_has_one_present_tense_line(model):
    for name, field in model.model_fields.items():
        text = field.description or ""
        assert text and "\n" not in text and text.endswith("."), name
        assert text.split()[0].endswith("s") and len(text) <= 100, (name, text)


def test_refused_values_become_one_user_error_in_the_users_terms():
    with pytest.raises(ValidationError) as e:
        PrepareOptions(max_basket_items=-1, on_bad_rows="ignore", last_n_baskets=2)
    error = option_error(e.value)
    assert isinstance(error, UserError)
    assert str(error) == (
        "--on-bad-rows: Input should be 'error' or 'skip' (got 'ignore'); "
        "--max-basket-items must be at least 1, not -1; --last-n-baskets is not an option."
    )
    assert str(option_error(e.value, lambda name: f"input.{name}")).startswith("input.on_bad_rows:")


@pytest.fixture
def export_csv(tmp_path):
    return write_csv(tmp_path, EXPORT_ROWS, columns=EXPORT)


def test_returns_are_excluded_and_counted(export_csv):
    data = prepare_log(export_csv, EXPORT_COLUMNS, PrepareOptions(on_bad_rows="skip"))
    assert baskets_by_id(data) == {
        "13047": [["A"], ["M"], ["B"]],
        "17850.0": [["A", "B", "POST"], ["C"]],
    }
    report = data.meta["report"]
    assert report["returns_excluded"] == 2 and "returns_kept" not in report
    assert report["rows_skipped"] == 1  # the row without customer, a purchase
    assert "returns excluded (quantity <= 0): 2 rows" in report_lines(report)


def test_report_says_why_customers_and_rows_went(export_csv):
    """What a user reads after prepare: an empty customer cell is shown as empty (not Python's
    None), and customers dropped for their basket count are a report line."""
    options = PrepareOptions(on_bad_rows="skip", min_baskets=3)
    data = prepare_log(export_csv, EXPORT_COLUMNS, options)
    report = data.meta["report"]
    assert list(data.user_ids) == ["13047"]  # 17850.0 has 2 baskets once returns are excluded
    assert report["skipped_because"][0].endswith("log.csv row 10 (CustomerID empty)")
    assert "None" not in report["skipped_because"][0]
    lines = report_lines(report)
    assert "customers dropped for their number of baskets (--min-baskets / --max-baskets): 1" in lines
    assert not any(line.startswith("rare items") for line in lines)  # no --min-item-baskets
    rare = prepare_log(export_csv, EXPORT_COLUMNS,
                       PrepareOptions(on_bad_rows="skip", min_item_baskets=2))  # fmt: skip
    # POST, C and M are bought in one basket each; 17850.0 is left with one basket ([A, B])
    assert "rare items (--min-item-baskets): 3 rows dropped" in report_lines(rare.meta["report"])
    assert list(rare.user_ids) == ["13047"]


def test_keep_returns_keeps_them_as_ordinary_rows(export_csv):
    options = PrepareOptions(on_bad_rows="skip", keep_returns=True)
    data = prepare_log(export_csv, EXPORT_COLUMNS, options)
    assert baskets_by_id(data) == {
        "13047": [["A"], ["M"], ["C"], ["B"]],
        "17850.0": [["A", "B", "POST"], ["B"], ["C"]],
    }
    assert data.meta["report"]["returns_kept"] == 2
    assert "returns_excluded" not in data.meta["report"]


def test_without_quantity_column_every_row_is_a_purchase(export_csv):
    columns = Columns(customer="CustomerID", item="StockCode", basket="InvoiceNo", timestamp="InvoiceDate")
    data = prepare_log(export_csv, columns, PrepareOptions(on_bad_rows="skip"))
    assert data.n_baskets == 7
    assert "returns_excluded" not in data.meta["report"]


def test_where_drops_rows_before_anything_else_and_counts_them(export_csv):
    # The row without customer is excluded by where, so it is no bad row: no --on-bad-rows skip.
    where = "StockCode NOT IN ('POST', 'M', 'BANK CHARGES') AND CustomerID IS NOT NULL"
    data = prepare_log(export_csv, EXPORT_COLUMNS, PrepareOptions(where=where))
    assert baskets_by_id(data) == {"13047": [["A"], ["B"]], "17850.0": [["A", "B"], ["C"]]}
    report = data.meta["report"]
    assert report["rows_dropped_where"] == 3 and report["returns_excluded"] == 2
    assert "rows_skipped" not in report
    assert "rows dropped by where: 3 of 10 read" in report_lines(report)


def test_where_on_typed_parquet_columns(tmp_path):
    table = pa.table({"customer_id": ["a", "a", "a"], "basket_id": ["1", "2", "3"],
                      "item_id": ["x", "y", "z"], "price": [1.5, 0.0, 2.0]})  # fmt: skip
    pq.write_table(table, tmp_path / "log.parquet")
    options = PrepareOptions(where="price > 0")
    data = prepare_log(tmp_path / "log.parquet", Columns(timestamp=None), options)
    assert baskets_by_id(data) == {"a": [["x"], ["z"]]}
    assert data.meta["report"]["rows_dropped_where"] == 1


@pytest.mark.parametrize(
    "where, message",
    [
        ("StockCode NOT IN ('POST'", r"--where \"StockCode NOT IN \('POST'\" is not usable: Parser Error"),
        ("NoSuchColumn = 'x'", r"is not usable: Binder Error.*NoSuchColumn.*columns of log\.csv \(InvoiceNo, StockCode"),
        ("Quantity > 0", r"is not usable: Binder Error.*every column of a CSV file is text.*TRY_CAST"),
        ("StockCode", r"is not a condition \(it gives VARCHAR, not BOOLEAN\)"),
        ("CAST(StockCode AS INTEGER) > 0", r"--where .* fails on a row of this file: Conversion Error"),
    ],
)  # fmt: skip
def test_bad_where_names_the_option_and_duckdbs_message(export_csv, where, message):
    with pytest.raises(UserError, match=message):
        prepare_log(export_csv, EXPORT_COLUMNS, PrepareOptions(where=where))


def test_where_that_leaves_nothing(export_csv):
    with pytest.raises(UserError, match=r"no row is left to prepare \(10 rows dropped where"):
        prepare_log(export_csv, EXPORT_COLUMNS, PrepareOptions(where="StockCode = 'nothing'"))


@pytest.mark.parametrize("value, shown", [("", " empty"), ("two", "='two'"), ("inf", "='inf'")])
def test_bad_quantity_names_file_row_column_and_value(tmp_path, value, shown):
    rows = [list(r) for r in EXPORT_ROWS[:3]]
    rows[1][2] = value
    path = write_csv(tmp_path, rows, columns=EXPORT)
    with pytest.raises(UserError, match=(
        r"1 row\(s\) with a missing or non-numeric quantity in 'Quantity', e\.g\. "
        rf".*log\.csv row 2 \(Quantity{shown}\).*--on-bad-rows skip"
    )):  # fmt: skip
        prepare_log(path, EXPORT_COLUMNS)


def test_missing_quantity_column_names_the_flag(tmp_path):
    path = write_csv(tmp_path, [r[:2] + r[3:] for r in EXPORT_ROWS],
                     columns=["InvoiceNo", "StockCode", "InvoiceDate", "CustomerID"])  # fmt: skip
    with pytest.raises(UserError, match=r"missing column\(s\) 'Quantity'.*--quantity-col for 'Quantity'"):
        prepare_log(path, EXPORT_COLUMNS)


def test_typed_parquet_quantity(tmp_path):
    table = pa.table({"customer_id": ["a"] * 4, "basket_id": ["1", "2", "3", "4"],
                      "item_id": ["x", "y", "z", "w"],
                      "quantity": pa.array([2, -1, 1, 0], pa.int16())})  # fmt: skip
    pq.write_table(table, tmp_path / "log.parquet")
    data = prepare_log(tmp_path / "log.parquet", Columns(timestamp=None, quantity="quantity"))
    assert baskets_by_id(data) == {"a": [["x"], ["z"]]}
    assert data.meta["report"]["returns_excluded"] == 2


# --- ids ----------------------------------------------------------------------------------------


def test_csv_ids_are_the_text_the_file_writes(tmp_path):
    rows = [["17850.0", "b1", "2024-01-01", "007"], ["17850.0", "b2", "2024-01-02", "7"],
            ["17850", "b3", "2024-01-01", "1e3"], ["17850", "b4", "2024-01-02", "007"]]  # fmt: skip
    path = write_csv(tmp_path, rows)
    first, second = prepare_log(path), prepare_log(path)
    assert baskets_by_id(first) == {"17850": [["1e3"], ["007"]], "17850.0": [["007"], ["7"]]}
    np.testing.assert_array_equal(first.user_ids, second.user_ids)
    np.testing.assert_array_equal(first.item_ids, second.item_ids)


@pytest.mark.parametrize("type_", [pa.float64(), pa.float32(), pa.decimal128(9, 2)])
def test_float_parquet_ids_drop_a_zero_fraction(tmp_path, type_):
    import decimal

    values = [17850.0, 17850.0, 13047.0, 13047.0, 2.5, 2.5, None]
    if pa.types.is_decimal(type_):
        values = [None if v is None else decimal.Decimal(str(v)) for v in values]
    table = pa.table({"customer_id": pa.array(values, type_),
                      "basket_id": ["1", "2", "3", "4", "5", "6", "7"],
                      "item_id": pa.array([1.0, 2.0, 1.0, 3.0, 0.5, 1.0, 1.0], pa.float64())})  # fmt: skip
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    options = PrepareOptions(on_bad_rows="skip")
    data = prepare_log(path, Columns(timestamp=None), options)
    fraction = "2.50" if pa.types.is_decimal(type_) else "2.5"  # a decimal keeps its scale
    assert baskets_by_id(data) == {
        "13047": [["1"], ["3"]], "17850": [["1"], ["2"]], fraction: [["0.5"], ["1"]],
    }  # fmt: skip
    assert data.meta["report"]["rows_skipped"] == 1  # the null customer
    np.testing.assert_array_equal(prepare_log(path, Columns(timestamp=None), options).user_ids,
                                  data.user_ids)  # fmt: skip


def test_nan_parquet_id_is_a_missing_id(tmp_path):
    table = pa.table({"customer_id": pa.array([1.0, 1.0, float("nan")]),
                      "basket_id": ["1", "2", "3"], "item_id": ["x", "y", "z"]})  # fmt: skip
    pq.write_table(table, tmp_path / "log.parquet")
    with pytest.raises(UserError, match=r"1 row\(s\) with no customer.*row 3 \(customer_id empty\)"):
        prepare_log(tmp_path / "log.parquet", Columns(timestamp=None))


# --- caps ---------------------------------------------------------------------------------------


def _cap_log(tmp_path: Path) -> Path:
    # Popularity (baskets holding the item): a 4, b 3, c 2, e 2, d 1.
    rows = [["u", "1", "a"], ["u", "1", "b"], ["u", "1", "c"], ["u", "1", "d"], ["u", "1", "e"],
            ["u", "2", "a"], ["u", "2", "b"], ["u", "3", "a"], ["u", "3", "c"], ["u", "3", "b"],
            ["v", "4", "a"], ["v", "5", "e"]]  # fmt: skip
    return write_csv(tmp_path, rows, columns=["customer_id", "basket_id", "item_id"])


def test_basket_cap_keeps_the_most_popular_items(tmp_path):
    data = prepare_log(_cap_log(tmp_path), Columns(timestamp=None),
                       PrepareOptions(max_basket_items=2))  # fmt: skip
    # basket 1: a, b (c, d, e dropped); basket 3: a, b (c dropped).
    assert baskets_by_id(data) == {"u": [["a", "b"], ["a", "b"], ["a", "b"]], "v": [["a"], ["e"]]}
    report = data.meta["report"]
    assert (report["baskets_capped"], report["items_dropped_basket_cap"]) == (2, 4)
    assert "basket cap: 2 baskets capped, 4 items dropped" in report_lines(report)


def test_basket_cap_ties_by_item_id(tmp_path):
    data = prepare_log(_cap_log(tmp_path), Columns(timestamp=None),
                       PrepareOptions(max_basket_items=3))  # fmt: skip
    assert baskets_by_id(data)["u"][0] == ["a", "b", "c"]  # c and e tie at 2: c first
    assert data.meta["report"]["items_dropped_basket_cap"] == 2


def test_no_cap_by_default_and_a_cap_of_zero_is_refused(tmp_path):
    data = prepare_log(_cap_log(tmp_path), Columns(timestamp=None))
    assert "baskets_capped" not in data.meta["report"]
    assert max(np.diff(data.basket_offsets)) == 5
    with pytest.raises(ValidationError, match="max_basket_items"):
        PrepareOptions(max_basket_items=0)


def test_last_n_counts_the_baskets_it_drops(tmp_path):
    data = prepare_log(_cap_log(tmp_path), Columns(timestamp=None),
                       PrepareOptions(last_n=2))  # fmt: skip
    assert baskets_by_id(data)["u"] == [["a", "b"], ["a", "b", "c"]]
    assert data.meta["report"]["baskets_dropped_last_n"] == 1
    assert "last-N cap: 1 older baskets dropped" in report_lines(data.meta["report"])


# --- timestamps ---------------------------------------------------------------------------------


def test_time_format_reads_us_dates(tmp_path):
    rows = [["c", "b1", "12/1/2010 8:26", "x"], ["c", "b2", "1/13/2011 10:00", "y"],
            ["c", "b3", "12/9/2010 23:59", "z"]]  # fmt: skip
    data = prepare_log(write_csv(tmp_path, rows), options=PrepareOptions(time_format="%m/%d/%Y %H:%M"))
    assert baskets_by_id(data) == {"c": [["x"], ["z"], ["y"]]}
    assert pd.Timestamp(int(data.basket_times[0])) == pd.Timestamp("2010-12-01 08:26")


def test_time_format_mismatch_is_a_bad_row_and_a_bad_format_an_error(tmp_path):
    rows = [["c", "b1", "12/1/2010 8:26", "x"], ["c", "b2", "2010-12-02", "y"]]
    path = write_csv(tmp_path, rows)
    with pytest.raises(UserError, match=r"a timestamp in 'timestamp' not in --time-format '%m/%d/%Y %H:%M' \(unparsable\).*row 2 \(timestamp='2010-12-02'\)"):
        prepare_log(path, options=PrepareOptions(time_format="%m/%d/%Y %H:%M"))
    with pytest.raises(UserError, match=r"--time-format '%Q' is not a strptime format"):
        prepare_log(path, options=PrepareOptions(time_format="%Q"))
