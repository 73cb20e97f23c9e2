"""Streaming and sharded top-k: the rows against a dense reference, shards against one process,
the manifest, and what a crash leaves behind."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import basketgnn.workflow.recommendations as recommend_mod
from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.split import Instances, make_split
from basketgnn.errors import UserError
from basketgnn.io_utils import write_table_stream
from basketgnn.registry import make_baseline
from basketgnn.workflow.recommendations import (
    MANIFEST,
    Shard,
    iter_recommendations,
    read_manifest,
    recommend_all,
    recommendation_table,
    write_recommendation_file,
    write_recommendation_parts,
)

N_USERS, N_ITEMS = 23, 9


@pytest.fixture(scope="module")
def data() -> BasketData:
    rng = np.random.default_rng(5)
    sequences = [
        [sorted(rng.choice(N_ITEMS, size=rng.integers(1, 4), replace=False).tolist())
         for _ in range(rng.integers(2, 6))]
        for _ in range(N_USERS)
    ]  # fmt: skip
    data = from_sequences(sequences, n_items=N_ITEMS)
    # Ids that are not their own index, so a row built from the wrong index shows.
    return BasketData(**{**data.__dict__, "user_ids": np.asarray([f"C{900 - u}" for u in range(N_USERS)]),
                         "item_ids": np.asarray([f"item-{i * 3}" for i in range(N_ITEMS)])})  # fmt: skip


@pytest.fixture(scope="module")
def model(data):
    split = make_split(data, "temporal")
    return make_baseline("p-topfreq").fit(data, split["train"], split["validate"])


def read_parts(folder) -> pd.DataFrame:
    files = sorted(folder.glob("part-*.parquet"))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


# --- shards ---------------------------------------------------------------------------------


def test_shard_parse_and_environment():
    assert Shard.parse("2/5") == Shard(2, 5) and Shard.parse(" 0 / 1 ") == Shard(0, 1)
    for bad in ("3/3", "1", "-1/2", "a/b", "0/0", "1/2/3"):
        with pytest.raises(UserError, match=r"expected i/n, shard i of n counted from 0"):
            Shard.parse(bad)
    assert Shard.from_env({}) is None
    assert Shard.from_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == Shard(1, 4)
    with pytest.raises(UserError, match="RANK='4' WORLD_SIZE='4'"):
        Shard.from_env({"RANK": "4", "WORLD_SIZE": "4"})


@pytest.mark.parametrize("n_parts", [0, 1, 2, 7, 10])
@pytest.mark.parametrize("count", [1, 3, 4])
def test_shards_cover_every_part_once_in_contiguous_runs(n_parts, count):
    runs = [Shard(i, count).parts(n_parts) for i in range(count)]
    assert [p for r in runs for p in r] == list(range(n_parts))
    assert max(len(r) for r in runs) - min(len(r) for r in runs) <= 1


# --- rows -----------------------------------------------------------------------------------


def test_recommendation_table_matches_a_row_by_row_reference(data):
    users = np.array([4, 0, 22])
    items = np.array([[3, 1], [0, 8], [8, 2]])
    scores = np.array([[0.5, 0.25], [2.0, -1.0], [0.0, 0.0]], dtype=np.float32)
    table = recommendation_table(users, items, scores, pa.array(data.user_ids), pa.array(data.item_ids))
    expected = pd.DataFrame(
        [(data.user_ids[u], data.item_ids[items[r, j]], j + 1, scores[r, j])
         for r, u in enumerate(users) for j in range(2)],
        columns=["customer_id", "item_id", "rank", "score"],
    )  # fmt: skip
    got = table.to_pandas()
    assert got.astype(object).values.tolist() == expected.astype(object).values.tolist()
    assert table.schema == recommend_mod.SCHEMA


def test_stream_in_chunks_equals_the_model_top_k_for_every_customer(data, model):
    whole = recommend_all(model, data, 4)
    pieces = list(iter_recommendations(model, data, 4, chunk=5))
    assert len(pieces) == 5 and max(p.num_rows for p in pieces) == 5 * 4
    assert pa.concat_tables(pieces).to_pandas().equals(whole)
    # The reference: each customer's scores from the model, sorted (stable, lower item first).
    scores = model.score(data, Instances(np.arange(N_USERS), data.n_baskets_per_user.astype(np.int64)))
    order = np.argsort(-scores, axis=1, kind="stable")[:, :4]
    assert whole["item_id"].tolist() == data.item_ids[order].ravel().tolist()
    assert np.array_equal(whole["score"].to_numpy(), np.take_along_axis(scores, order, 1).ravel())
    assert whole["customer_id"].tolist() == np.repeat(data.user_ids, 4).tolist()


@pytest.mark.parametrize("name", ["recs.parquet", "recs.csv"])
def test_single_file_streams_the_same_rows(data, model, tmp_path, name):
    rows = write_recommendation_file(model, data, 3, tmp_path / name, chunk=4)
    got = pd.read_csv(tmp_path / name) if name.endswith(".csv") else pd.read_parquet(tmp_path / name)
    whole = recommend_all(model, data, 3)
    assert rows == len(got) == 3 * N_USERS
    assert got["customer_id"].astype(str).tolist() == whole["customer_id"].tolist()
    assert np.allclose(got["score"], whole["score"], rtol=1e-6) and (got["rank"] == whole["rank"]).all()
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left


def test_one_scoring_writes_parquet_and_csv_together(data, model, tmp_path):
    paths = [tmp_path / "recs.parquet", tmp_path / "recs.csv"]
    assert write_recommendation_file(model, data, 3, paths, chunk=10) == 3 * N_USERS
    parquet, csv = pd.read_parquet(paths[0]), pd.read_csv(paths[1], dtype={"customer_id": str, "item_id": str})
    for column in ("customer_id", "item_id", "rank"):
        assert csv[column].tolist() == parquet[column].tolist()
    assert np.allclose(csv["score"], parquet["score"], rtol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recs.csv", "recs.parquet"]


def test_a_failed_stream_leaves_no_file(data, model, tmp_path):
    def broken():
        yield from iter_recommendations(model, data, 3, chunk=10)
        raise RuntimeError("scoring failed")

    (tmp_path / "recs.csv").write_text("old\n")
    with pytest.raises(RuntimeError, match="scoring failed"):
        write_table_stream([tmp_path / "recs.parquet", tmp_path / "recs.csv"], broken(), recommend_mod.SCHEMA)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recs.csv"]
    assert (tmp_path / "recs.csv").read_text() == "old\n"  # the old file is untouched


# --- partitioned dataset --------------------------------------------------------------------


def test_three_shards_write_exactly_the_one_process_dataset(data, model, tmp_path):
    one = write_recommendation_parts(model, data, 4, tmp_path / "one", chunk=4, source={"m": "x"})
    assert one.written == 6 and one.manifest == tmp_path / "one" / MANIFEST
    whole = recommend_all(model, data, 4)
    assert read_parts(tmp_path / "one").equals(whole)

    sharded = tmp_path / "sharded"
    results = [write_recommendation_parts(model, data, 4, sharded, shard=Shard(i, 3), chunk=4,
                                          source={"m": "x"}) for i in (2, 0, 1)]  # fmt: skip
    assert [r.manifest is None for r in results] == [True, True, False]  # complete after the last
    assert sorted(p.name for p in sharded.glob("part-*")) == sorted(p.name for p in (tmp_path / "one").glob("part-*"))
    assert read_parts(sharded).equals(whole)  # rows and scores, exactly

    manifest = read_manifest(sharded)
    assert manifest["customers"] == N_USERS and manifest["rows"] == 4 * N_USERS and manifest["k"] == 4
    assert manifest["shards"] == 3 and manifest["source"] == {"m": "x"} and manifest["chunk"] == 4
    assert [p["file"] for p in manifest["parts"]] == [f"part-{i:05d}.parquet" for i in range(6)]
    assert [p["customers"] for p in manifest["parts"]] == [4, 4, 4, 4, 4, 3]
    for part in manifest["parts"]:
        table = pq.read_table(sharded / part["file"])
        assert table.num_rows == part["rows"]
        assert table.column("customer_id").to_pylist()[0] == data.user_ids[part["first_customer"]]
    single = {k: v for k, v in json.loads((tmp_path / "one" / MANIFEST).read_text()).items() if k != "created"}
    assert single == {**{k: v for k, v in manifest.items() if k != "created"}, "shards": 1}


def test_a_crash_keeps_complete_parts_and_a_rerun_resumes(data, model, tmp_path, monkeypatch):
    real = recommend_mod.rank_items
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(recommend_mod, "rank_items", failing)
    out = tmp_path / "recs"
    with pytest.raises(RuntimeError, match="killed"):
        write_recommendation_parts(model, data, 4, out, chunk=5)
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    whole = recommend_all(model, data, 4)
    assert read_parts(out).equals(whole.iloc[: 2 * 5 * 4].reset_index(drop=True))
    with pytest.raises(UserError, match="not complete"):
        read_manifest(out)

    monkeypatch.setattr(recommend_mod, "rank_items", real)
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")}
    done = write_recommendation_parts(model, data, 4, out, chunk=5)
    assert (done.skipped, done.written) == (2, 3)
    assert all(before[n] == (out / n).stat().st_mtime_ns for n in before)  # kept, not rewritten
    assert read_parts(out).equals(whole) and read_manifest(out)["rows"] == len(whole)


def test_a_rerun_with_other_settings_rewrites_and_drops_stale_parts(data, model, tmp_path):
    out = tmp_path / "recs"
    write_recommendation_parts(model, data, 4, out, chunk=3)  # 8 parts
    (out / ".part-00001.parquet.abc.tmp").write_text("left by a killed run")
    done = write_recommendation_parts(model, data, 2, out, chunk=10)  # 3 parts, other k
    assert done.written == 3 and done.skipped == 0
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST] + [f"part-{i:05d}.parquet" for i in range(3)]
    assert read_parts(out).equals(recommend_all(model, data, 2))


def test_partitioned_output_refuses_a_file(data, model, tmp_path):
    (tmp_path / "recs").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        write_recommendation_parts(model, data, 4, tmp_path / "recs")
