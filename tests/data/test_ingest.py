"""Transaction log ingestion: ordering, de-duplication, filters, id mapping, and bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import Columns, PrepareOptions, load_data, prepare_log
from basketgnn.errors import UserError


def write_csv(tmp_path, rows, name="log.csv", columns=None):
    df = pd.DataFrame(rows, columns=columns or ["customer_id", "basket_id", "timestamp", "item_id"])
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def baskets_by_id(data: BasketData) -> dict[str, list[list[str]]]:
    return {
        str(data.user_ids[u]): [sorted(data.item_ids[b].tolist()) for b in data.user_baskets(u)]
        for u in range(data.n_users)
    }


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


def test_baskets_ordered_by_time_and_deduplicated(tmp_path):
    data = prepare_log(write_csv(tmp_path, ROWS))
    assert baskets_by_id(data) == {
        "c1": [["x", "y"], ["z"]],
        "c2": [["x"], ["y"], ["z"]],
    }
    assert data.meta["report"]["duplicate_items_in_basket"] == 1
    data.validate()


def test_basket_id_only_orders_numerically(tmp_path):
    rows = [["c1", "10", "a"], ["c1", "9", "b"], ["c1", "100", "c"]]
    path = write_csv(tmp_path, rows, columns=["customer_id", "basket_id", "item_id"])
    data = prepare_log(path, Columns(timestamp=None))
    assert baskets_by_id(data) == {"c1": [["b"], ["a"], ["c"]]}


def test_timestamp_only_groups_rows_into_baskets(tmp_path):
    rows = [["c1", "2024-01-02 10:00", "a"], ["c1", "2024-01-01", "b"], ["c1", "2024-01-02 10:00", "c"]]
    path = write_csv(tmp_path, rows, columns=["customer_id", "timestamp", "item_id"])
    data = prepare_log(path, Columns(basket=None))
    assert baskets_by_id(data) == {"c1": [["b"], ["a", "c"]]}


def test_custom_column_names_and_quantity_ignored(tmp_path):
    rows = [["u", "o1", "2024-01-01", "p", 3], ["u", "o2", "2024-01-02", "p", 0]]
    path = write_csv(tmp_path, rows, columns=["cust", "order", "when", "sku", "qty"])
    data = prepare_log(path, Columns("cust", "sku", "order", "when", "qty"))
    assert baskets_by_id(data) == {"u": [["p"], ["p"]]}


def test_folder_of_files_and_parquet(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_csv(folder, ROWS[:3], name="part1.csv")
    pd.DataFrame(ROWS[3:], columns=["customer_id", "basket_id", "timestamp", "item_id"]).to_parquet(
        folder / "part2.parquet"
    )
    assert baskets_by_id(prepare_log(folder)) == baskets_by_id(prepare_log(write_csv(tmp_path, ROWS)))


def test_filters(tmp_path):
    path = write_csv(tmp_path, ROWS)
    # z is in 2 baskets, x in 2, y in 2: min_item_baskets=3 drops all -> error; 2 keeps all.
    assert prepare_log(path, options=PrepareOptions(min_item_baskets=2)).n_items == 3
    last2 = prepare_log(path, options=PrepareOptions(last_n_baskets=2))
    assert baskets_by_id(last2)["c2"] == [["y"], ["z"]]
    only_c1 = prepare_log(path, options=PrepareOptions(max_baskets=2))
    assert list(only_c1.user_ids) == ["c1"]
    only_c2 = prepare_log(path, options=PrepareOptions(min_baskets=3))
    assert list(only_c2.user_ids) == ["c2"]


def test_rare_item_filter_drops_emptied_baskets(tmp_path):
    rows = ROWS + [["c1", "b6", "2024-02-01", "rare"]]
    data = prepare_log(write_csv(tmp_path, rows), options=PrepareOptions(min_item_baskets=2))
    assert "rare" not in set(data.item_ids)
    assert baskets_by_id(data)["c1"] == [["x", "y"], ["z"]]


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


# --- bad input: one clear message each, naming the problem and the fix -------------------------


def test_missing_column_names_file_and_flag(tmp_path):
    path = write_csv(tmp_path, [["c", "b", "2024-01-01", "x"]], columns=["cust", "basket_id", "timestamp", "item_id"])
    with pytest.raises(UserError, match=r"log\.csv: missing column\(s\) 'customer_id'.*--customer-col"):
        prepare_log(path)


def test_unparsable_timestamp_names_row(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "not a date", "y"]]
    with pytest.raises(UserError, match=r"log\.csv row 2 \(timestamp='not a date'\).*--on-bad-rows skip"):
        prepare_log(write_csv(tmp_path, rows))


def test_timestamp_outside_storable_range_names_file_row_column_and_fix(tmp_path):
    # pandas parses these (at a coarser unit than ns) but they do not fit int64 nanoseconds.
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "9999-12-31", "y"],
            ["c1", "b3", "1500-01-02", "z"], ["c1", "b4", "2024-01-05", "x"]]  # fmt: skip
    with pytest.raises(UserError) as err:
        prepare_log(write_csv(tmp_path, rows))
    message = str(err.value)
    assert "2 row(s) with a timestamp in 'timestamp' outside 1677-09-22 .. 2262-04-11" in message
    assert "log.csv row 2 (timestamp='9999-12-31')" in message
    assert "log.csv row 3 (timestamp='1500-01-02')" in message
    assert "replace placeholder dates" in message and "--on-bad-rows skip" in message
    assert "unparsable" not in message


def test_timestamps_outside_range_can_be_skipped(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "9999-12-31", "y"],
            ["c1", "b3", "2024-01-05", "z"]]  # fmt: skip
    data = prepare_log(write_csv(tmp_path, rows), options=PrepareOptions(on_bad_rows="skip"))
    assert data.meta["report"]["rows_skipped"] == 1
    assert baskets_by_id(data) == {"c1": [["x"], ["z"]]}


def test_bad_rows_can_be_skipped_and_are_reported(tmp_path):
    rows = ROWS + [["c1", "b9", "never", "y"], [None, "b9", "2024-01-01", "y"]]
    data = prepare_log(write_csv(tmp_path, rows), options=PrepareOptions(on_bad_rows="skip"))
    assert data.meta["report"]["rows_skipped"] == 2
    assert baskets_by_id(data) == baskets_by_id(prepare_log(write_csv(tmp_path, ROWS, "ok.csv")))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(UserError, match="empty.csv: the file is empty"):
        prepare_log(path)


def test_header_only_file(tmp_path):
    path = write_csv(tmp_path, [])
    with pytest.raises(UserError, match="the log has no rows"):
        prepare_log(path)


def test_not_a_log_file(tmp_path):
    path = tmp_path / "log.xlsx"
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(UserError, match=r"log\.xlsx: not a CSV or Parquet file"):
        prepare_log(path)


def test_corrupt_parquet(tmp_path):
    path = tmp_path / "log.parquet"
    path.write_text("customer_id,item_id\n")
    with pytest.raises(UserError, match=r"log\.parquet: cannot be read as Parquet"):
        prepare_log(path)


def test_customers_with_too_few_baskets(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c2", "b2", "2024-01-01", "x"]]
    with pytest.raises(UserError, match="No customer is left with at least 2 baskets"):
        prepare_log(write_csv(tmp_path, rows))


def test_no_basket_and_no_time_column(tmp_path):
    with pytest.raises(UserError, match="Neither a basket column nor a timestamp column"):
        prepare_log(write_csv(tmp_path, ROWS), Columns(basket=None, timestamp=None))
