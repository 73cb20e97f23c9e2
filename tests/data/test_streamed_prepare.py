"""The prepared data streamed to disk and read memory-mapped gives what the in-memory path
gives: ``arrays_file`` (the .npz written from chunks, read as maps), the build streamed from
DuckDB a few rows at a time, the dataset saved and loaded, the split as arrays, the sample and
the fingerprint computed a block at a time."""

from __future__ import annotations

import hashlib
import json
import zipfile

import duckdb
import numpy as np
import pytest

from basketgnn import fingerprint
from basketgnn.data import sample as sample_mod
from basketgnn.data import split as split_mod
from basketgnn.data.arrays_file import ArraysWriter, load_arrays
from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.ingest import build as build_mod
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.errors import UserError

ARRAY_NAMES = ["items", "basket_offsets", "user_offsets", "basket_times", "user_ids", "item_ids", "user_part"]


def _members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_streamed_npz_holds_the_bytes_np_savez_writes(tmp_path):
    a = np.arange(10, dtype=np.int64) * 3
    ids = np.asarray(["a", "bcd", "é日", ""])
    np.savez(tmp_path / "ref.npz", a=a, ids=ids, empty=np.zeros(0, np.int32))
    with ArraysWriter(tmp_path / "new.npz") as w:
        with w.array("a", np.int64, 10) as put:
            put(a[:3])
            put(a[3:3])
            put(a[3:].tolist())
        with w.array("ids", ids.dtype, 4) as put:
            for s in ids:
                put(np.asarray([s], dtype=object))
        w.whole("empty", np.zeros(0, np.int32))
    assert _members(tmp_path / "new.npz") == _members(tmp_path / "ref.npz")
    mapped = load_arrays(tmp_path / "new.npz")
    assert not mapped["a"].flags.writeable and type(mapped["a"]) is np.ndarray
    assert np.array_equal(mapped["a"], a) and mapped["ids"].tolist() == ids.tolist()
    assert mapped["ids"].dtype == ids.dtype and mapped["empty"].shape == (0,)


def test_a_wrong_number_of_values_is_refused(tmp_path):
    with ArraysWriter(tmp_path / "x.npz") as w:
        with pytest.raises(ValueError, match="2 values written, 3 announced"):
            with w.array("a", np.int32, 3) as put:
                put([1, 2])
        with pytest.raises(ValueError, match="more than the 1 values"):
            with w.array("b", np.int32, 1) as put:
                put([1, 2])


def test_a_compressed_file_is_read_into_memory(tmp_path):
    np.savez_compressed(tmp_path / "c.npz", a=np.arange(5))
    got = load_arrays(tmp_path / "c.npz")
    assert np.array_equal(got["a"], np.arange(5)) and got["a"].flags.writeable


def _good_rows(seed: int, n_cust: int = 9) -> list[tuple[str, str, str, int]]:
    rng = np.random.default_rng(seed)
    names = ["c0", "é", "日本語", "z9", "a", "ß1", "c10", "c2", "longer-customer-id"][:n_cust]
    rows = []
    for b in range(120):
        cust, t0 = names[int(rng.integers(len(names)))], int(rng.integers(0, 400)) * 10
        for _ in range(int(rng.integers(1, 6))):
            rows.append((cust, f"i{min(rng.geometric(0.2), 20):02d}", f"{b}", t0 + int(rng.integers(0, 3))))
    return rows


def _build(rows, columns, options, arrays_file=None):
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")  # as the engine runs
    con.execute("CREATE TABLE raw AS SELECT 1 AS x")
    con.execute("CREATE TABLE good (cust VARCHAR, item VARCHAR, basket VARCHAR, t BIGINT)")
    con.executemany("INSERT INTO good VALUES (?, ?, ?, ?)", rows)
    return build_mod.build(con, columns, options, {}, arrays_file)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("columns", "options"),
    [(Columns(), PrepareOptions()), (Columns(timestamp=None), PrepareOptions()),
     (Columns(), PrepareOptions(min_item_baskets=3, max_basket_items=2, last_n=4, min_baskets=2))],
)  # fmt: skip
def test_the_streamed_build_gives_the_in_memory_arrays(tmp_path, monkeypatch, seed, columns, options):
    monkeypatch.setattr(build_mod, "STREAM_ROWS", 7)  # many batches, batch ends mid-customer
    rows = _good_rows(seed)
    expected = _build(rows, columns, options)
    got = _build(rows, columns, options, tmp_path / "arrays.npz")
    for name in ARRAY_NAMES:
        e, g = getattr(expected, name), getattr(got, name)
        assert g.dtype == e.dtype and np.array_equal(g, e), name
    assert not got.items.flags.writeable  # mapped from the file, not held
    # the same file BasketData.save writes for the in-memory arrays
    expected.save(tmp_path / "saved")
    assert _members(tmp_path / "arrays.npz") == _members(tmp_path / "saved" / "arrays.npz")


def test_a_saved_dataset_loads_mapped_and_saves_again_the_same(tmp_path):
    data = from_sequences([[[1, 2], [3]], [[0], [2, 3], [1]], [[4]]], user_part=np.array([0, 1, -1], np.int8))
    data.save(tmp_path / "a")
    mapped = BasketData.load(tmp_path / "a")
    held = BasketData.load(tmp_path / "a", mmap=False)
    for name in ARRAY_NAMES:
        assert np.array_equal(getattr(mapped, name), getattr(data, name)), name
        assert not getattr(mapped, name).flags.writeable and getattr(held, name).flags.writeable
    mapped.save(tmp_path / "b")
    assert _members(tmp_path / "a" / "arrays.npz") == _members(tmp_path / "b" / "arrays.npz")
    assert fingerprint.data_fingerprint(mapped) == fingerprint.data_fingerprint(data)


def _reference_fingerprint(data, *sets, described=None) -> str:
    """The fingerprint's definition: whole arrays' bytes and whole id lists as JSON."""
    h = hashlib.sha256()
    if described is not None:
        h.update(json.dumps(described, sort_keys=True).encode())
    for arr in (data.items, data.basket_offsets, data.user_offsets, data.basket_times, data.user_part):
        h.update(np.ascontiguousarray(arr).tobytes())
    for ids in (data.user_ids, data.item_ids):
        h.update(json.dumps(np.asarray(ids).tolist()).encode())
    for inst in sets:
        h.update(np.ascontiguousarray(inst.users).tobytes())
        h.update(np.ascontiguousarray(inst.n_history).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("block", [8, 1 << 22])
def test_the_blockwise_fingerprint_is_the_whole_arrays_hash(monkeypatch, block):
    monkeypatch.setattr(fingerprint, "_BLOCK", block)
    seqs = [[[i % 7, (i * 3) % 7], [(i + 1) % 7]] for i in range(40)]
    data = from_sequences(seqs)
    data = BasketData(**{**data.__dict__, "user_ids": np.asarray([f"u\"{i}é" for i in range(40)])})
    sp = split_mod.temporal_split(from_sequences([[[1], [2], [3], [4]]] * 3))
    assert fingerprint.data_fingerprint(data, sp["train"], described={"x": 1}) == _reference_fingerprint(
        data, sp["train"], described={"x": 1}
    )
    empty = from_sequences([])
    assert fingerprint.data_fingerprint(empty) == _reference_fingerprint(empty)


def _four_basket_data(user_ids: list[str]) -> BasketData:
    seqs = [[[u % 5], [(u + 1) % 5], [(u + 2) % 5, 4], [u % 3]] for u in range(len(user_ids))]
    data = from_sequences(seqs)
    return BasketData(**{**data.__dict__, "user_ids": np.asarray(user_ids)})


@pytest.mark.parametrize("ids", [[f"c{i:03d}" for i in range(30)], [str(i) for i in range(30)]])
def test_the_split_as_arrays_loads_as_the_json_split(tmp_path, monkeypatch, ids):
    monkeypatch.setattr(split_mod, "_BLOCK", 4)
    data = _four_basket_data(ids)  # sorted ids (binary search) and unsorted ones ("10" < "2")
    sp, _ = sample_mod.sample_split(split_mod.temporal_split(data), data, 12, seed=3)
    split_mod.save_split(sp, data, tmp_path / "s.json")
    split_mod.save_split(sp, data, tmp_path / "s.npz")
    from_json = split_mod.load_split(tmp_path / "s.json", data)
    from_npz = split_mod.make_split(data, str(tmp_path / "s.npz"))
    assert from_npz.name == from_json.name == sp.name
    for p in sp.parts:
        assert np.array_equal(from_npz[p].users, from_json[p].users)
        assert np.array_equal(from_npz[p].n_history, sp[p].n_history)


def test_the_split_as_arrays_refuses_other_data(tmp_path):
    data = _four_basket_data([f"c{i}" for i in range(6)])
    split_mod.save_split(split_mod.temporal_split(data), data, tmp_path / "s.npz")
    other = _four_basket_data([f"c{i}" for i in range(1, 7)])
    with pytest.raises(UserError, match="names customer\\(s\\) not in the dataset, e.g. 'c0'"):
        split_mod.load_split(tmp_path / "s.npz", other)
    shorter = from_sequences([[[1], [2]]] * 6)
    shorter = BasketData(**{**shorter.__dict__, "user_ids": np.asarray([f"c{i}" for i in range(6)])})
    with pytest.raises(UserError, match="asks for a history of"):
        split_mod.load_split(tmp_path / "s.npz", shorter)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a split file"):
        split_mod.load_split(tmp_path / "bad.npz", data)


@pytest.mark.parametrize("n", [1, 5, 17, 40])
def test_the_sample_is_the_n_smallest_keys_ties_to_the_lower_index(monkeypatch, n):
    keys = np.random.default_rng(n).integers(0, 6, size=40).astype(np.uint64)  # many ties
    monkeypatch.setattr(sample_mod, "customer_keys", lambda ids, seed: keys)
    order = np.lexsort((np.arange(40), keys))
    expected = np.zeros(40, bool)
    expected[order[:n]] = True
    assert np.array_equal(sample_mod.sampled_customers(np.arange(40).astype(str), n, 0), expected)


def test_customer_keys_blockwise_are_the_whole_arrays(monkeypatch):
    ids = np.asarray([f"id{i}" for i in range(50)])
    whole = sample_mod.customer_keys(ids, 7)
    monkeypatch.setattr(sample_mod, "_BLOCK", 6)
    assert np.array_equal(sample_mod.customer_keys(ids, 7), whole)
