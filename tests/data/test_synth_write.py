"""Writing logs (``data/synth/write.py``): one file atomically, a big log as Parquet parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.synth import COLUMNS, generate_log, item_structure, write_log, write_log_parts


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return generate_log(n_customers=60, n_items=30, mean_baskets=4.0, seed=0)


def test_write_log_csv_round_trip(tmp_path: Path, log: pd.DataFrame) -> None:
    path = tmp_path / "log.csv"
    write_log(log, path)
    back = pd.read_csv(path, parse_dates=["timestamp"], dtype={"quantity": np.int64})
    back["timestamp"] = back["timestamp"].astype("datetime64[ns]")
    pd.testing.assert_frame_equal(back, log, check_dtype=False)
    assert [p.name for p in tmp_path.iterdir()] == ["log.csv"]


def test_write_log_parquet_round_trip(tmp_path: Path, log: pd.DataFrame) -> None:
    path = tmp_path / "sub" / "log.parquet"
    write_log(log, str(path))
    back = pd.read_parquet(path)
    back["timestamp"] = back["timestamp"].astype("datetime64[ns]")
    pd.testing.assert_frame_equal(back, log, check_dtype=False)


def test_write_log_rejects_other_extensions(tmp_path: Path, log: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        write_log(log, tmp_path / "log.json")
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        write_log(log, tmp_path / "log")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, log: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.csv"
    path.write_text("old\n")

    def half_write(self: pd.DataFrame, target: Path, **kwargs: object) -> None:
        Path(target).write_text("customer_id,bas")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_write)
    with pytest.raises(OSError, match="disk full"):
        write_log(log, path)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["log.csv"]


# --- big logs in parts -------------------------------------------------------------------------

PART_KNOBS = {"n_items": 50, "mean_baskets": 4.0, "max_baskets": 12}


def test_parts_make_one_log_with_unique_ids_and_the_same_items(tmp_path):
    out = tmp_path / "big"
    parts = write_log_parts(out, 250, chunk_customers=100, seed=3, **PART_KNOBS)
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert sorted(p.name for p in out.iterdir()) == [p.name for p in parts]  # nothing else
    frames = [pd.read_parquet(p) for p in parts]
    df = pd.concat(frames, ignore_index=True)
    assert list(df.columns) == list(COLUMNS)
    assert [f["customer_id"].nunique() for f in frames] == [100, 100, 50]
    assert df["customer_id"].nunique() == 250 and df["customer_id"].str.len().nunique() == 1
    # A basket belongs to one customer and no two customers share a basket id.
    assert df.groupby("basket_id")["customer_id"].nunique().max() == 1
    assert df.groupby("basket_id")["timestamp"].nunique().max() == 1
    # The items are the whole log's: the same catalogue as generate_log with this seed.
    assert set(df["item_id"]) <= set(item_structure(50, 3).item_ids)
    # Every part is itself what generate_log makes for that chunk, so parts are reproducible.
    again = write_log_parts(tmp_path / "again", 250, chunk_customers=100, seed=3, **PART_KNOBS)
    pd.testing.assert_frame_equal(pd.read_parquet(again[1]), frames[1])
    assert not frames[0]["customer_id"].isin(frames[1]["customer_id"]).any()


def test_parts_resume_after_a_crash_and_start_over_for_other_settings(tmp_path):
    out = tmp_path / "big"
    partial = tmp_path / ".big.partial"
    written: list[int] = []
    # A crash after the first part: nothing under the final name, the part kept aside.
    def crash(index, count, rows):
        written.append(index)
        if index == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_log_parts(out, 250, 100, 3, on_part=crash, **PART_KNOBS)
    assert not out.exists() and (partial / "part-00000.parquet").is_file()
    first = pd.read_parquet(partial / "part-00000.parquet")
    write_log_parts(out, 250, 100, 3, on_part=lambda i, n, r: written.append(i), **PART_KNOBS)
    assert written == [0, 1, 2]  # part 0 was not made again
    assert not partial.exists()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "part-00000.parquet"), first)
    # Other settings: what a crash left is not mixed in; an existing log is replaced whole.
    with pytest.raises(KeyboardInterrupt):
        write_log_parts(out, 250, 100, 4, on_part=crash, **PART_KNOBS)
    made: list[int] = []
    write_log_parts(out, 120, 100, 4, on_part=lambda i, n, r: made.append(i), **PART_KNOBS)
    assert made == [0, 1] and len(list(out.iterdir())) == 2

