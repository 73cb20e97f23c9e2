"""Transaction log ingestion, every case on both engines: ordering, de-duplication, filters, id
mapping, and bad input.

Each test runs on the engine (DuckDB, prepare_log) and on its pandas test oracle
(tests/support/pandas_oracle.py); on DuckDB it also checks that the dataset, report and error
message are the oracle's (see tests.support.ingest.Engine). What only DuckDB does is tested in
test_ingest_duckdb.py, the options the oracle lacks (quantity, where, caps, time format) in
test_ingest_options.py.
"""

from __future__ import annotations

import gzip
from datetime import date, datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from basketgnn.data.dataset import NO_TIME
from basketgnn.data.ingest import Columns, PrepareOptions, load_data, prepare_log
from tests.support.ingest import (
    HEADER,
    ROWS,
    assert_same,
    assert_same_arrays,
    baskets_by_id,
    write_csv,
)
from tests.support.pandas_oracle import prepare_log_pandas


def test_baskets_ordered_by_time_and_deduplicated(tmp_path, engine):
    data = engine.prepare(write_csv(tmp_path, ROWS))
    assert baskets_by_id(data) == {
        "c1": [["x", "y"], ["z"]],
        "c2": [["x"], ["y"], ["z"]],
    }
    assert data.meta["report"]["duplicate_items_in_basket"] == 1
    data.validate()


def test_basket_id_only_orders_numerically(tmp_path, engine):
    rows = [["c1", "10", "a"], ["c1", "9", "b"], ["c1", "100", "c"], ["c1", "010", "d"]]
    path = write_csv(tmp_path, rows, columns=["customer_id", "basket_id", "item_id"])
    data = engine.prepare(path, Columns(timestamp=None))
    assert baskets_by_id(data) == {"c1": [["b"], ["d"], ["a"], ["c"]]}  # 9, 010, 10, 100
    assert (data.basket_times == NO_TIME).all()


def test_timestamp_only_groups_rows_into_baskets(tmp_path, engine):
    rows = [["c1", "2024-01-02 10:00", "a"], ["c1", "2024-01-01", "b"],
            ["c1", "2024-01-02 10:00", "c"], ["c2", "2024-01-02 10:00", "a"],
            ["c2", "2024-01-02T10:00:00", "b"], ["c2", "2024-01-03", "b"]]  # fmt: skip
    path = write_csv(tmp_path, rows, columns=["customer_id", "timestamp", "item_id"])
    data = engine.prepare(path, Columns(basket=None))
    # the same time spelled two ways is one basket
    assert baskets_by_id(data) == {"c1": [["b"], ["a", "c"]], "c2": [["a", "b"], ["b"]]}


def test_custom_column_names_and_quantity_ignored_unless_named(tmp_path, engine):
    rows = [["u", "o1", "2024-01-01", "p", 3], ["u", "o2", "2024-01-02", "p", 0]]
    path = write_csv(tmp_path, rows, columns=["cust", "order", "when", "sku", "qty"])
    data = engine.prepare(path, Columns(customer="cust", item="sku", basket="order", timestamp="when"))
    assert baskets_by_id(data) == {"u": [["p"], ["p"]]}


def test_folder_of_csv_and_parquet_parts(tmp_path, engine):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_csv(folder, ROWS[:3], name="part1.csv")
    pd.DataFrame(ROWS[3:], columns=HEADER).to_parquet(folder / "part2.parquet")
    (folder / "notes.txt").write_text("not a log")
    assert_same(engine.prepare(folder), engine.prepare(write_csv(tmp_path, ROWS)))


def test_gzipped_csv_blank_lines_and_na_strings(tmp_path, engine):
    text = "\n" + pd.DataFrame(ROWS, columns=HEADER).to_csv(index=False) + "\nNA,b9,2024-01-01,x\n"
    path = tmp_path / "log.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    data = engine.prepare(path, options=PrepareOptions(on_bad_rows="skip"))
    assert data.meta["report"]["rows_skipped"] == 1  # "NA" is a missing customer
    assert baskets_by_id(data) == baskets_by_id(engine.prepare(write_csv(tmp_path, ROWS)))


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_typed_parquet_columns(tmp_path, engine, unit):
    stamps = ["2024-01-01 10:00:00.123456789", "2024-01-01 10:00:00.123456789",
              "2024-01-02 00:30", "2024-01-01 09:00", "2024-01-03 23:30"]  # fmt: skip
    times = pd.to_datetime(stamps, format="ISO8601").tz_localize("Europe/Paris").as_unit(unit)
    df = pd.DataFrame(
        {
            "customer_id": [7, 7, 7, 12, 12],
            "basket_id": [1, 1, 2, 3, 4],
            "timestamp": times,
            "item_id": [100, 101, 100, 5, 5],
            "quantity": [1, 2, 1, 1, 1],
        }
    )
    df.to_parquet(tmp_path / "log.parquet")
    data = engine.prepare(tmp_path / "log.parquet")
    # ids as strings (sorted as strings), zoned times in UTC
    assert baskets_by_id(data) == {"12": [["5"], ["5"]], "7": [["100", "101"], ["100"]]}
    assert data.basket_times[0] == pd.Timestamp("2024-01-01 08:00", tz="UTC").value


# ROWS plus a rare item for c1 and a one-basket customer c3. Baskets per customer, in order:
# c1 [x y] [z] [rare]; c2 [x] [y] [z]; c3 [x]. Baskets holding x: 3, y: 2, z: 2, rare: 1.
FILTER_ROWS = ROWS + [["c1", "b6", "2024-02-01", "rare"], ["c3", "b7", "2024-01-01", "x"]]


def _one_basket_customers_kept(**values) -> PrepareOptions:
    """Options with ``min_baskets=1``, below what the model lets a user set (a customer needs a
    history and a target): built without validation, so that the cases show what the other
    filters leave of the one-basket customer c3."""
    return PrepareOptions.model_construct(min_baskets=1, **values)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (PrepareOptions(), {"c1": [["x", "y"], ["z"], ["rare"]], "c2": [["x"], ["y"], ["z"]]}),
        (PrepareOptions(min_item_baskets=2), {"c1": [["x", "y"], ["z"]], "c2": [["x"], ["y"], ["z"]]}),
        (_one_basket_customers_kept(min_item_baskets=3), {"c1": [["x"]], "c2": [["x"]], "c3": [["x"]]}),
        (PrepareOptions(last_n=2), {"c1": [["z"], ["rare"]], "c2": [["y"], ["z"]]}),
        (_one_basket_customers_kept(last_n=1), {"c1": [["rare"]], "c2": [["z"]], "c3": [["x"]]}),
        (_one_basket_customers_kept(max_baskets=2), {"c3": [["x"]]}),
        (PrepareOptions(min_item_baskets=2, max_baskets=2), {"c1": [["x", "y"], ["z"]]}),
        (PrepareOptions(min_baskets=3), {"c1": [["x", "y"], ["z"], ["rare"]], "c2": [["x"], ["y"], ["z"]]}),
        (PrepareOptions(min_item_baskets=2, last_n=2, min_baskets=2, max_baskets=2),
         {"c1": [["x", "y"], ["z"]], "c2": [["y"], ["z"]]}),
    ],
)  # fmt: skip
def test_filters(tmp_path, engine, options, expected):
    data = engine.prepare(write_csv(tmp_path, FILTER_ROWS), options=options)
    assert baskets_by_id(data) == expected
    assert sorted(data.item_ids) == sorted({i for bs in expected.values() for b in bs for i in b})


def test_rare_item_filter_drops_emptied_baskets(tmp_path, engine):
    rows = ROWS + [["c1", "b6", "2024-02-01", "rare"]]
    data = engine.prepare(write_csv(tmp_path, rows), options=PrepareOptions(min_item_baskets=2))
    assert "rare" not in set(data.item_ids)
    assert baskets_by_id(data)["c1"] == [["x", "y"], ["z"]]
    assert data.meta["report"]["rows_dropped_rare_items"] == 1
    assert data.n_baskets_per_user.tolist() == [2, 3]


# --- bad input: one clear message each, naming the problem and the fix; the same on both engines


def test_missing_column_names_file_and_flag(tmp_path, engine):
    path = write_csv(tmp_path, [["c", "b", "2024-01-01", "x"]],
                     columns=["cust", "basket_id", "timestamp", "item_id"])  # fmt: skip
    engine.error(path, match=r"log\.csv: missing column\(s\) 'customer_id'.*--customer-col")


def test_missing_column_in_parquet(tmp_path, engine):
    path = tmp_path / "log.parquet"
    pd.DataFrame(ROWS, columns=HEADER).drop(columns=["timestamp"]).to_parquet(path)
    engine.error(path, match=r"log\.parquet: missing column\(s\) 'timestamp'.*--time-col")


def test_unparsable_timestamp_names_file_row_and_value(tmp_path, engine):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "not a date", "y"]]
    engine.error(
        write_csv(tmp_path, rows),
        match=r"log\.csv row 2 \(timestamp='not a date'\).*--on-bad-rows skip",
    )


def test_row_numbers_count_records_per_file(tmp_path, engine):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_csv(folder, ROWS, name="a.csv")
    text = pd.DataFrame(ROWS + [["c1", "b9", "never", "y"]], columns=HEADER).to_csv(index=False)
    (folder / "b.csv").write_text(text.replace("\n", "\n\n", 3))  # blank lines are not rows
    engine.error(folder, match=r"b\.csv row 8 \(timestamp='never'\)")


# Outside the int64-ns range before or only after applying the offset, next to an unparsable
# value and one that the offset brings back into the range.
RANGE_STAMPS = ["2024-01-01", "9999-12-31", "not a date", "2262-04-11 23:00-02:00",
                "1677-09-21 01:00+02:00", "2262-04-11 23:00+02:00", "1500-01-02"]  # fmt: skip


def test_timestamps_outside_storable_range_name_file_row_column_and_fix(tmp_path, engine):
    rows = [["c1", f"b{k}", s, "x"] for k, s in enumerate(RANGE_STAMPS)]
    message = engine.error(write_csv(tmp_path, rows))
    assert "1 row(s) with an unparsable timestamp in 'timestamp' (dates are read as ISO, YYYY-MM-DD HH:MM; " in message
    assert "name other spellings with --time-format, e.g. '%m/%d/%Y %H:%M'), e.g. " in message
    assert "log.csv row 3 (timestamp='not a date')" in message
    assert "4 row(s) with a timestamp in 'timestamp' outside 1677-09-22 .. 2262-04-11" in message
    assert "log.csv row 2 (timestamp='9999-12-31')" in message
    assert "log.csv row 4 (timestamp='2262-04-11 23:00-02:00')" in message
    assert "replace placeholder dates" in message and "--on-bad-rows skip" in message


def test_timestamps_outside_range_can_be_skipped(tmp_path, engine):
    rows = [["c1", f"b{k}", s, "x"] for k, s in enumerate(RANGE_STAMPS)]
    data = engine.prepare(write_csv(tmp_path, rows), options=PrepareOptions(on_bad_rows="skip"))
    assert data.meta["report"]["rows_skipped"] == 5
    assert baskets_by_id(data) == {"c1": [["x"], ["x"]]}
    assert data.basket_times[-1] == pd.Timestamp("2262-04-11 21:00", tz="UTC").value


@pytest.mark.parametrize(
    ("type_", "value"),
    [(pa.timestamp("us", tz="UTC"), datetime(1500, 1, 2)), (pa.date32(), date(9999, 1, 2))],
)
def test_typed_parquet_timestamps_outside_range(tmp_path, engine, type_, value):
    path = tmp_path / "log.parquet"
    pq.write_table(
        pa.table(
            {
                "customer_id": ["c1", "c1", "c1"],
                "basket_id": ["b1", "b2", "b3"],
                "timestamp": pa.array([datetime(2024, 1, 1), value, datetime(2024, 1, 3)], type_),
                "item_id": ["x", "y", "z"],
            }
        ),
        path,
    )
    # The example value is spelled by each engine's Parquet reader; the rest is the same.
    engine.error(
        path,
        match=r"1 row\(s\) with a timestamp in 'timestamp' outside 1677-09-22 \.\. 2262-04-11.*"
        r"log\.parquet row 2 \(timestamp=",
        same_as_pandas=False,
    )
    skip = PrepareOptions(on_bad_rows="skip")
    data = engine.function(path, options=skip)
    assert_same_arrays(data, prepare_log_pandas(path, options=skip))
    assert baskets_by_id(data) == {"c1": [["x"], ["z"]]}
    assert data.meta["report"]["rows_skipped"] == 1


def test_bad_rows_can_be_skipped_and_are_reported(tmp_path, engine):
    rows = ROWS + [["c1", "b9", "never", "y"], [None, "b9", "2024-01-01", "y"],
                   ["c1", "b9", None, "  "], ["c2", None, "2024-01-01", "y"]]  # fmt: skip
    data = engine.prepare(write_csv(tmp_path, rows), options=PrepareOptions(on_bad_rows="skip"))
    report = data.meta["report"]
    assert report["rows_skipped"] == 4
    assert len(report["skipped_because"]) == 4
    assert_same_arrays(data, engine.prepare(write_csv(tmp_path, ROWS, "ok.csv")))


def test_every_row_bad(tmp_path, engine):
    rows = [["c1", "b1", "never", "x"]]
    engine.error(
        write_csv(tmp_path, rows),
        options=PrepareOptions(on_bad_rows="skip"),
        match="every row was bad and skipped",
    )


def test_empty_file(tmp_path, engine):
    path = tmp_path / "empty.csv"
    path.write_text("")
    engine.error(path, match="empty.csv: the file is empty")


def test_header_only_file(tmp_path, engine):
    engine.error(write_csv(tmp_path, []), match="the log has no rows")


def test_not_a_log_file(tmp_path, engine):
    path = tmp_path / "log.xlsx"
    path.write_bytes(b"PK\x03\x04")
    engine.error(path, match=r"log\.xlsx: not a CSV or Parquet file")


def test_missing_path(tmp_path, engine):
    engine.error(tmp_path / "nowhere.csv", match="no such file or folder")


def test_corrupt_parquet(tmp_path, engine):
    path = tmp_path / "log.parquet"
    path.write_text("customer_id,item_id\n")
    # The reader's own error is quoted, so the messages differ there.
    engine.error(path, match=r"log\.parquet: cannot be read as Parquet", same_as_pandas=False)


def test_customers_with_too_few_baskets(tmp_path, engine):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c2", "b2", "2024-01-01", "x"]]
    engine.error(write_csv(tmp_path, rows), match="No customer is left with at least 2 baskets")


def test_no_basket_and_no_time_column(tmp_path, engine):
    engine.error(
        write_csv(tmp_path, ROWS),
        Columns(basket=None, timestamp=None),
        match="Neither a basket column nor a timestamp column",
    )


# --- the prepared dataset and the DNNTSP JSON splits (whichever engine made it) --------------


def test_save_load_roundtrip(tmp_path):
    data = prepare_log(write_csv(tmp_path, ROWS))
    data.save(tmp_path / "ds")
    loaded = load_data(tmp_path / "ds")
    assert baskets_by_id(loaded) == baskets_by_id(data)
    np.testing.assert_array_equal(loaded.basket_times, data.basket_times)
    assert loaded.meta["n_users"] == 2


def test_dnntsp_json_import_matches_published_statistics(dnntsp):
    data = load_data(dnntsp("TaFeng.json"))
    assert (data.n_users, data.n_items, data.n_baskets) == (6888 + 984 + 1969, 4935, 73355)
    assert np.bincount(data.user_part).tolist() == [6888, 984, 1969]
