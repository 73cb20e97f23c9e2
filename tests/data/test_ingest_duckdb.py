"""DuckDB ingestion: agreement with the pandas oracle where the two could drift apart (id and
time parsing, larger logs), the memory cap, and what only DuckDB reports.

The cases common to the engine and its oracle (each also checking that DuckDB's dataset, report
and message are the oracle's) are in test_ingest.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from basketgnn.data.ingest import Columns, PrepareOptions
from basketgnn.data.ingest import prepare_log as prepare_log_duckdb
from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from tests.support.ingest import ROWS, write_csv
from tests.support.pandas_oracle import prepare_log_pandas


def test_meta_is_the_oracle_meta_plus_the_engine(tmp_path, duckdb_engine):
    path = write_csv(tmp_path, ROWS)
    data = duckdb_engine.prepare(path)
    assert data.meta["engine"] == "duckdb"
    assert {k: v for k, v in data.meta.items() if k != "engine"} == prepare_log_pandas(path).meta


@pytest.mark.parametrize(
    "ids",
    [
        ["2.5", "10", "-1", "1e1"],  # floats: compared as numbers, ties by the id string
        ["b10", "b9", "b100", "7"],  # not all numbers: string order
        ["1_000", "20", "3"],  # pandas does not read "1_000" as a number
    ],
)
def test_basket_id_only_orders_like_pandas(tmp_path, ids, duckdb_engine):
    rows = [["c1", b, f"i{k}"] for k, b in enumerate(ids)]
    path = write_csv(tmp_path, rows, columns=["customer_id", "basket_id", "item_id"])
    duckdb_engine.prepare(path, Columns(timestamp=None))


def test_iso_timestamps_with_offsets_and_fractions(tmp_path, duckdb_engine):
    stamps = ["2024-01-02T10:00:00Z", "2024-01-02 10:00:00+02:00", "2024-01-02 09:00:00.5-01",
              "2024-01-02 10:00:00.123456789", " 2024-01-03 ", "2024-1-4 7:05", "2024-01-05 08:00 UTC",
              "2024-01-06T00:00:00+0130"]  # fmt: skip
    rows = [["c1", f"b{k}", s, "x"] for k, s in enumerate(stamps)]
    duckdb_engine.prepare(write_csv(tmp_path, rows))


@pytest.fixture(scope="module")
def synthetic_log():
    return generate_log(n_customers=300, n_items=60, seed=1)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(
    "options",
    [
        PrepareOptions(),
        PrepareOptions(min_item_baskets=250, last_n=6, min_baskets=3, max_baskets=5),
    ],
)
def test_synthetic_log(tmp_path, synthetic_log, suffix, options, duckdb_engine):
    path = tmp_path / f"log{suffix}"
    write_log(synthetic_log, path)
    data = duckdb_engine.prepare(path, options=options)
    assert data.n_users > 0
    if options.min_item_baskets > 1:
        assert data.meta["report"]["rows_dropped_rare_items"] > 0
        assert data.meta["report"]["customers_dropped_basket_count"] > 0


def test_synthetic_log_without_basket_column(tmp_path, synthetic_log, duckdb_engine):
    path = tmp_path / "log.csv"
    write_log(synthetic_log.drop(columns=["basket_id"]), path)
    data = duckdb_engine.prepare(path, Columns(basket=None))
    assert data.n_users > 0


def test_memory_limit_far_below_the_log(tmp_path, duckdb_engine):
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
    data = duckdb_engine.prepare(path, memory_limit="64MB", threads=2)
    assert data.meta["report"]["rows_read"] > 300_000


# --- what only DuckDB reports ------------------------------------------------------------------


def test_non_iso_timestamp_is_reported_not_misread(tmp_path):
    rows = [["c1", "b1", "2024-01-01", "x"], ["c1", "b2", "01/05/2024", "y"]]
    with pytest.raises(UserError, match=r"log\.csv row 2 \(timestamp='01/05/2024'\)"):
        prepare_log_duckdb(write_csv(tmp_path, rows))


def test_malformed_csv(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("customer_id,basket_id,timestamp,item_id\nc1,b1,2024-01-01,x,extra,fields\n")
    with pytest.raises(UserError, match=r"log\.csv: cannot be read as CSV"):
        prepare_log_duckdb(path)


def test_out_of_memory_is_a_user_error(tmp_path, synthetic_log):
    path = tmp_path / "log.csv"
    write_log(synthetic_log, path)
    with pytest.raises(UserError, match=re.escape("ran out of memory (memory_limit=1MB)")):
        prepare_log_duckdb(path, memory_limit="1MB")


def test_working_tables_live_in_a_database_file_in_the_temp_folder(tmp_path, synthetic_log, monkeypatch):
    """DuckDB works in a database file (tables stored compressed, so a big log's tables take a
    fraction of an in-memory database's spill) inside ``temp_dir``, which is left empty."""
    import duckdb

    path = tmp_path / "log.csv"
    write_log(synthetic_log, path)
    temp = tmp_path / "temp"
    temp.mkdir()
    opened = []
    connect = duckdb.connect

    def recording_connect(database=":memory:", *args, **kwargs):
        opened.append(Path(database))
        assert Path(database).parent.parent == temp  # the run's own folder in temp_dir
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", recording_connect)
    data = prepare_log_duckdb(path, temp_dir=temp)
    assert data.n_users > 0
    assert [p.name for p in opened] == ["prepare.duckdb"]
    assert list(temp.iterdir()) == []
