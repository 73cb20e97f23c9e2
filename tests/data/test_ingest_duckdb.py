"""DuckDB ingestion: the same dataset, report and errors as the pandas path, within a memory cap."""

from __future__ import annotations

import gzip
import re
from datetime import date, datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log
from basketgnn.data.ingest_duckdb import prepare_log_duckdb
from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError

HEADER = ["customer_id", "basket_id", "timestamp", "item_id"]

ROWS = [
    # customer c2's baskets arrive out of order in the file; b3 repeats item x.
    ["c2", "b4", "2024-01-05", "y"],
    ["c1", "b1", "2024-01-01", "x"],
    ["c1", "b1", "2024-01-01", "y"],
    ["c2", "b3", "2024-01-02", "x"],
    ["c2", "b3", "2024-01-02", "x"],
    ["c1", "b2", "2024-01-03", "z"],
    ["c2", "b5", "2024-01-09", "z"],
]

ARRAYS = ("items", "basket_offsets", "user_offsets", "basket_times", "user_ids", "item_ids",
          "user_part")  # fmt: skip


def write_csv(tmp_path, rows, name="log.csv", columns=None):
    path = tmp_path / name
    pd.DataFrame(rows, columns=columns or HEADER).to_csv(path, index=False)
    return path


def assert_same(ours: BasketData, reference: BasketData) -> None:
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name), err_msg=name)
        assert getattr(ours, name).dtype == getattr(reference, name).dtype, name
    assert ours.meta["report"] == reference.meta["report"]
    ours.validate()


def both(path, columns=Columns(), options=PrepareOptions(), **kwargs) -> BasketData:
    """prepare_log_duckdb's result, after checking it equals prepare_log's."""
    ours = prepare_log_duckdb(path, columns, options, **kwargs)
    assert_same(ours, prepare_log(path, columns, options))
    return ours


def test_rows_example_and_meta(tmp_path):
    path = write_csv(tmp_path, ROWS)
    data = both(path)
    assert data.meta["report"]["duplicate_items_in_basket"] == 1
    assert data.meta["engine"] == "duckdb"
    reference = prepare_log(path)
    assert {k: v for k, v in data.meta.items() if k != "engine"} == reference.meta
    assert data.n_users == 2 and data.n_baskets == 5


def test_basket_id_only_orders_numerically(tmp_path):
    rows = [["c1", "10", "a"], ["c1", "9", "b"], ["c1", "100", "c"], ["c1", "010", "d"]]
    path = write_csv(tmp_path, rows, columns=["customer_id", "basket_id", "item_id"])
    data = both(path, Columns(timestamp=None))
    assert data.item_ids[data.items].tolist() == ["b", "d", "a", "c"]  # 9, 010, 10, 100
    assert (data.basket_times == np.iinfo(np.int64).min).all()


@pytest.mark.parametrize(
    "ids",
    [
        ["2.5", "10", "-1", "1e1"],  # floats: compared as numbers, ties by the id string
        ["b10", "b9", "b100", "7"],  # not all numbers: string order
        ["1_000", "20", "3"],  # pandas does not read "1_000" as a number
    ],
)
def test_basket_id_only_orders_like_pandas(tmp_path, ids):
    rows = [["c1", b, f"i{k}"] for k, b in enumerate(ids)]
    path = write_csv(tmp_path, rows, columns=["customer_id", "basket_id", "item_id"])
    both(path, Columns(timestamp=None))


def test_timestamp_only_groups_rows_into_baskets(tmp_path):
    rows = [["c1", "2024-01-02 10:00", "a"], ["c1", "2024-01-01", "b"],
            ["c1", "2024-01-02 10:00", "c"], ["c2", "2024-01-02 10:00", "a"],
            ["c2", "2024-01-02T10:00:00", "b"], ["c2", "2024-01-03", "b"]]  # fmt: skip
    path = write_csv(tmp_path, rows, columns=["customer_id", "timestamp", "item_id"])
    data = both(path, Columns(basket=None))
    assert data.n_baskets_per_user.tolist() == [2, 2]


def test_iso_timestamps_with_offsets_and_fractions(tmp_path):
    stamps = ["2024-01-02T10:00:00Z", "2024-01-02 10:00:00+02:00", "2024-01-02 09:00:00.5-01",
              "2024-01-02 10:00:00.123456789", " 2024-01-03 ", "2024-1-4 7:05", "2024-01-05 08:00 UTC",
              "2024-01-06T00:00:00+0130"]  # fmt: skip
    rows = [["c1", f"b{k}", s, "x"] for k, s in enumerate(stamps)]
    both(write_csv(tmp_path, rows))


def test_custom_column_names_and_quantity_ignored(tmp_path):
    rows = [["u", "o1", "2024-01-01", "p", 3], ["u", "o2", "2024-01-02", "p", 0]]
    path = write_csv(tmp_path, rows, columns=["cust", "order", "when", "sku", "qty"])
    both(path, Columns("cust", "sku", "order", "when", "qty"))


def test_folder_of_csv_and_parquet_parts(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_csv(folder, ROWS[:3], name="part1.csv")
    pd.DataFrame(ROWS[3:], columns=HEADER).to_parquet(folder / "part2.parquet")
    (folder / "notes.txt").write_text("not a log")
    data = both(folder)
    assert_same(data, prepare_log(write_csv(tmp_path, ROWS)))


def test_gzipped_csv_blank_lines_and_na_strings(tmp_path):
    text = "\n" + pd.DataFrame(ROWS, columns=HEADER).to_csv(index=False) + "\nNA,b9,2024-01-01,x\n"
    path = tmp_path / "log.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    data = both(path, options=PrepareOptions(on_bad_rows="skip"))
    assert data.meta["report"]["rows_skipped"] == 1


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_typed_parquet_columns(tmp_path, unit):
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
    data = both(tmp_path / "log.parquet")
    assert data.user_ids.tolist() == ["12", "7"]


@pytest.mark.parametrize(
    "options",
    [
        PrepareOptions(min_item_baskets=2),
        PrepareOptions(min_item_baskets=3, min_baskets=1),
        PrepareOptions(last_n_baskets=2),
        PrepareOptions(last_n_baskets=1, min_baskets=1),
        PrepareOptions(max_baskets=2, min_baskets=1),
        PrepareOptions(min_item_baskets=2, max_baskets=2),
        PrepareOptions(min_baskets=3),
        PrepareOptions(min_item_baskets=2, last_n_baskets=2, min_baskets=2, max_baskets=2),
    ],
)
def test_filters(tmp_path, options):
    rows = ROWS + [["c1", "b6", "2024-02-01", "rare"], ["c3", "b7", "2024-01-01", "x"]]
    both(write_csv(tmp_path, rows), options=options)


def test_rare_item_filter_drops_emptied_baskets(tmp_path):
    rows = ROWS + [["c1", "b6", "2024-02-01", "rare"]]
    data = both(write_csv(tmp_path, rows), options=PrepareOptions(min_item_baskets=2))
    assert "rare" not in set(data.item_ids)
    assert data.meta["report"]["rows_dropped_rare_items"] == 1
    assert data.n_baskets_per_user.tolist() == [2, 3]


@pytest.fixture(scope="module")
def synthetic_log():
    return generate_log(n_customers=300, n_items=60, seed=1)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(
    "options",
    [
        PrepareOptions(),
        PrepareOptions(min_item_baskets=250, last_n_baskets=6, min_baskets=3, max_baskets=5),
    ],
)
def test_synthetic_log(tmp_path, synthetic_log, suffix, options):
    path = tmp_path / f"log{suffix}"
    write_log(synthetic_log, path)
    data = both(path, options=options)
    assert data.n_users > 0
    if options.min_item_baskets > 1:
        assert data.meta["report"]["rows_dropped_rare_items"] > 0
        assert data.meta["report"]["customers_dropped_basket_count"] > 0


def test_synthetic_log_without_basket_column(tmp_path, synthetic_log):
    path = tmp_path / "log.csv"
    write_log(synthetic_log.drop(columns=["basket_id"]), path)
    both(path, Columns(basket=None))


def test_memory_limit_far_below_the_log(tmp_path):
    """~320k rows with long ids (a 34 MB CSV). At 64 MB DuckDB gets through only by spilling to
    disk: with spilling switched off, or at 32 MB, this log runs out of memory."""
    log = generate_log(n_customers=7800, n_items=2000, mean_baskets=10, seed=0)
    log = log.assign(
        customer_id="customer-of-the-shop-" + log["customer_id"],
        item_id="product-in-the-catalogue-" + log["item_id"],
        basket_id="receipt-number-" + log["basket_id"],
    )
    assert len(log) > 300_000
    path = tmp_path / "big.csv"
    write_log(log, path)
    del log
    data = both(path, memory_limit="64MB", threads=2)
    assert data.meta["report"]["rows_read"] > 300_000


# --- bad input: the same messages as the pandas path -------------------------------------------


def same_error(path, columns=Columns(), options=PrepareOptions(), match=None) -> str:
    """The UserError message of prepare_log_duckdb, checked equal to prepare_log's."""
    with pytest.raises(UserError, match=match) as ours:
        prepare_log_duckdb(path, columns, options)
    with pytest.raises(UserError) as reference:
        prepare_log(path, columns, options)
    assert str(ours.value) == str(reference.value)
    return str(ours.value)


def test_missing_column_names_file_and_flag(tmp_path):
    path = write_csv(tmp_path, [["c", "b", "2024-01-01", "x"]],
                     columns=["cust", "basket_id", "timestamp", "item_id"])  # fmt: skip
    same_error(path, match=r"log\.csv: missing column\(s\) 'customer_id'.*--customer-col")


def test_missing_column_in_parquet(tmp_path):
    path = tmp_path / "log.parquet"
    pd.DataFrame(ROWS, columns=HEADER).drop(columns=["timestamp"]).to_parquet(path)
    same_error(path, match=r"log\.parquet: missing column\(s\) 'timestamp'.*--time-col")


def test_unparsable_timestamp_names_file_row_and_value(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "not a date", "y"]]
    same_error(
        write_csv(tmp_path, rows),
        match=r"log\.csv row 2 \(timestamp='not a date'\).*--on-bad-rows skip",
    )


def test_row_numbers_count_records_per_file(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_csv(folder, ROWS, name="a.csv")
    text = pd.DataFrame(ROWS + [["c1", "b9", "never", "y"]], columns=HEADER).to_csv(index=False)
    (folder / "b.csv").write_text(text.replace("\n", "\n\n", 3))  # blank lines are not rows
    same_error(folder, match=r"b\.csv row 8 \(timestamp='never'\)")


def test_non_iso_timestamp_is_reported_not_misread(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "01/05/2024", "y"]]
    with pytest.raises(UserError, match=r"log\.csv row 2 \(timestamp='01/05/2024'\)"):
        prepare_log_duckdb(write_csv(tmp_path, rows))


def test_timestamps_outside_storable_range_same_message(tmp_path):
    # Past the ns range before or only after applying the offset (no int64 overflow in SQL),
    # next to an unparsable one and one the offset brings back into range.
    stamps = ["2024-01-01", "9999-12-31", "not a date", "2262-04-11 23:00-02:00",
              "1677-09-21 01:00+02:00", "2262-04-11 23:00+02:00", "0001-01-01"]  # fmt: skip
    rows = [["c1", f"b{k}", s, "x"] for k, s in enumerate(stamps)]
    message = same_error(write_csv(tmp_path, rows))
    assert "1 row(s) with an unparsable timestamp in 'timestamp', e.g. " in message
    assert "4 row(s) with a timestamp in 'timestamp' outside 1677-09-22 .. 2262-04-11" in message
    assert "log.csv row 4 (timestamp='2262-04-11 23:00-02:00')" in message
    data = both(write_csv(tmp_path, rows, "skip.csv"), options=PrepareOptions(on_bad_rows="skip"))
    assert data.meta["report"]["rows_skipped"] == 5


@pytest.mark.parametrize(
    "type_, value",
    [(pa.timestamp("us", tz="UTC"), datetime(1500, 1, 2)), (pa.date32(), date(9999, 1, 2))],
)
def test_typed_parquet_timestamps_outside_range(tmp_path, type_, value):
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
    for prepare in (prepare_log, prepare_log_duckdb):
        # The example value is spelled by each engine's reader, the rest is the same.
        with pytest.raises(UserError, match=r"1 row\(s\) with a timestamp in 'timestamp' outside "
                           r"1677-09-22 \.\. 2262-04-11.*log\.parquet row 2 \(timestamp="):
            prepare(path)
    skip = PrepareOptions(on_bad_rows="skip")
    data, reference = prepare_log_duckdb(path, options=skip), prepare_log(path, options=skip)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(data, name), getattr(reference, name), err_msg=name)
    assert data.n_baskets == 2 and data.meta["report"]["rows_skipped"] == 1


def test_bad_rows_can_be_skipped_and_are_reported(tmp_path):
    rows = ROWS + [["c1", "b9", "never", "y"], [None, "b9", "2024-01-01", "y"],
                   ["c1", "b9", None, "  "], ["c2", None, "2024-01-01", "y"]]  # fmt: skip
    data = both(write_csv(tmp_path, rows), options=PrepareOptions(on_bad_rows="skip"))
    report = data.meta["report"]
    assert report["rows_skipped"] == 4
    assert len(report["skipped_because"]) == 4
    clean = prepare_log_duckdb(write_csv(tmp_path, ROWS, "ok.csv"))
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(data, name), getattr(clean, name), err_msg=name)


def test_every_row_bad(tmp_path):
    rows = [["c1", "b1", "never", "x"]]
    same_error(
        write_csv(tmp_path, rows),
        options=PrepareOptions(on_bad_rows="skip"),
        match="every row was bad and skipped",
    )


def test_empty_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("")
    same_error(path, match="empty.csv: the file is empty")


def test_header_only_file(tmp_path):
    same_error(write_csv(tmp_path, []), match="the log has no rows")


def test_not_a_log_file(tmp_path):
    path = tmp_path / "log.xlsx"
    path.write_bytes(b"PK\x03\x04")
    same_error(path, match=r"log\.xlsx: not a CSV or Parquet file")


def test_missing_path(tmp_path):
    same_error(tmp_path / "nowhere.csv", match="no such file or folder")


def test_corrupt_parquet(tmp_path):
    path = tmp_path / "log.parquet"
    path.write_text("customer_id,item_id\n")
    with pytest.raises(UserError, match=r"log\.parquet: cannot be read as Parquet"):
        prepare_log_duckdb(path)


def test_malformed_csv(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("customer_id,basket_id,timestamp,item_id\nc1,b1,2024-01-01,x,extra,fields\n")
    with pytest.raises(UserError, match=r"log\.csv: cannot be read as CSV"):
        prepare_log_duckdb(path)


def test_customers_with_too_few_baskets(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c2", "b2", "2024-01-01", "x"]]
    same_error(write_csv(tmp_path, rows), match="No customer is left with at least 2 baskets")


def test_no_basket_and_no_time_column(tmp_path):
    same_error(
        write_csv(tmp_path, ROWS),
        Columns(basket=None, timestamp=None),
        match="Neither a basket column nor a timestamp column",
    )


def test_out_of_memory_is_a_user_error(tmp_path, synthetic_log):
    path = tmp_path / "log.csv"
    write_log(synthetic_log, path)
    with pytest.raises(UserError, match=re.escape("ran out of memory (memory_limit=1MB)")):
        prepare_log_duckdb(path, memory_limit="1MB")
