"""The data fingerprints and the settings hash (basketgnn/fingerprint.py).

data_fingerprint changes when any array, id, instance set or description changes, and not for
an equal copy, a save/load round trip or other meta; source_fingerprint is the bytes of a file
or the arrays of a prepared folder, never its meta.json. settings_hash's serialisation (sorted
JSON, default separators, str() of other values, ``digits``) is pinned by
tests/pipeline/test_cache.py::test_settings_hash_is_the_sha256_of_sorted_json, next to the stage
keys that depend on it; here only what that test leaves out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest

from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.split import Instances
from basketgnn.errors import UserError
from basketgnn.fingerprint import data_fingerprint, settings_hash, source_fingerprint

SEQS = [[[3, 5], [5]], [[1], [0, 2]], [[4], [2], [1, 3]]]


@pytest.fixture
def data() -> BasketData:
    return from_sequences(SEQS, n_items=6, user_part=np.array([0, 1, 2], dtype=np.int8))


def changed(array: np.ndarray, position: int, value) -> np.ndarray:
    out = array.copy()
    out[position] = value
    return out


def test_data_fingerprint_changes_with_every_array_and_id(data):
    variants = {
        "items": replace(data, items=changed(data.items, 0, 4)),
        "basket_offsets": replace(data, basket_offsets=changed(data.basket_offsets, 1, 1)),
        "user_offsets": replace(data, user_offsets=changed(data.user_offsets, 1, 1)),
        "basket_times": replace(data, basket_times=changed(data.basket_times, 2, 10**18)),
        "user_part": replace(data, user_part=changed(data.user_part, 0, -1)),
        "user_ids": replace(data, user_ids=changed(data.user_ids, 1, "9")),
        "item_ids": replace(data, item_ids=changed(data.item_ids, 5, "I5")),
    }
    prints = {name: data_fingerprint(d) for name, d in variants.items()}
    base = data_fingerprint(data)
    assert len(base) == 64 and int(base, 16) >= 0  # sha256 hex
    assert base not in prints.values() and len(set(prints.values())) == len(prints)


def test_data_fingerprint_is_equal_for_equal_data_whatever_meta_or_round_trip(data, tmp_path):
    copy = BasketData(**{k: np.copy(v) for k, v in vars(data).items() if k != "meta"}, meta={"source": "x"})
    assert data_fingerprint(copy) == data_fingerprint(data)
    data.save(tmp_path / "ds")
    assert data_fingerprint(BasketData.load(tmp_path / "ds")) == data_fingerprint(data)


def test_data_fingerprint_covers_instance_sets_and_the_description(data):
    a = Instances(np.array([0, 2]), np.array([1, 2]))
    same = Instances(np.array([0, 2]), np.array([1, 2]))
    base = data_fingerprint(data)
    assert data_fingerprint(data, a) == data_fingerprint(data, same) != base
    assert data_fingerprint(data, a) != data_fingerprint(data, Instances(np.array([0, 1]), np.array([1, 2])))
    assert data_fingerprint(data, a) != data_fingerprint(data, Instances(np.array([0, 2]), np.array([1, 1])))
    assert data_fingerprint(data, a) != data_fingerprint(data, a, a)
    described = data_fingerprint(data, described={"source": "log.csv", "report": {"rows": 9}})
    assert described != base
    assert described == data_fingerprint(data, described={"report": {"rows": 9}, "source": "log.csv"})
    assert described != data_fingerprint(data, described={"source": "log.csv", "report": {"rows": 8}})


def test_source_fingerprint_of_a_file_is_its_bytes(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"train": {"u": [[1], [2]]}, "validate": {}, "test": {}}')
    b.write_bytes(a.read_bytes())
    assert source_fingerprint(a) == hashlib.sha256(a.read_bytes()).hexdigest()[:16] == source_fingerprint(b)
    b.write_text(a.read_text().replace("[2]", "[3]"))
    assert source_fingerprint(b) != source_fingerprint(a)


def test_source_fingerprint_of_a_folder_is_its_arrays_not_its_meta(data, tmp_path):
    folder = tmp_path / "ds"
    data.save(folder)
    first = source_fingerprint(folder)
    assert len(first) == 16
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "source": "elsewhere.csv", "report": {}}))
    assert source_fingerprint(folder) == first
    replace(data, meta={"source": "again.csv"}).save(folder)  # written again: new zip entry dates
    assert source_fingerprint(folder) == first
    replace(data, items=changed(data.items, 0, 4)).save(folder)
    assert source_fingerprint(folder) != first


def test_source_fingerprint_of_something_unreadable_is_a_user_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"^spec\.yaml: .*empty is not a readable prepared dataset folder"):
        source_fingerprint(tmp_path / "empty", where="spec.yaml: ")
    with pytest.raises(UserError, match=r"missing\.json is not a readable dataset file"):
        source_fingerprint(tmp_path / "missing.json")


def test_settings_hash_of_nested_settings_ignores_key_order_and_sees_values():
    a = {"model": {"lr": 0.01, "embed_dim": 8}, "seeds": [0, 1]}
    b = {"seeds": [0, 1], "model": {"embed_dim": 8, "lr": 0.01}}
    assert settings_hash(a) == settings_hash(b)
    assert settings_hash(a) != settings_hash({**a, "seeds": [1, 0]})  # list order is content
    assert settings_hash(a) != settings_hash({**a, "model": {"lr": 0.02, "embed_dim": 8}})
    assert len(settings_hash(a)) == 64 and settings_hash(a, 8) == settings_hash(b)[:8]


@pytest.mark.parametrize("ids", [["C1", 'x"y\\z', "é"], [3, 14, 15], [], [f"id{i}" for i in range(50)]])
@pytest.mark.parametrize("block", [8, 64, 1 << 22])  # values per block: 1, 8 and all
def test_id_lists_hash_as_their_json_in_blocks(monkeypatch, ids, block):
    """An id list enters the hash as json.dumps(ids) would write it, whatever the blocks, so
    the keys of saved runs and caches stay the same."""
    from basketgnn import fingerprint

    monkeypatch.setattr(fingerprint, "_BLOCK", block)
    h = hashlib.sha256()
    fingerprint._update_json_list(h, np.asarray(ids))
    assert h.hexdigest() == hashlib.sha256(json.dumps(ids).encode()).hexdigest()
