"""The prepared dataset (basketgnn/data/dataset.py), each behaviour against the nested lists it
was built from: from_sequences, the histories and targets of instances, ranges, the folder round
trip, aligned_to another catalogue, validate, and never replacing a folder that is not a
dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

from basketgnn.data.dataset import NO_TIME, BasketData, from_sequences, ranges
from basketgnn.errors import UserError


def random_sequences(seed: int = 0, n_users: int = 12, n_items: int = 9) -> list[list[list[int]]]:
    rng = np.random.default_rng(seed)
    return [
        [sorted(set(rng.integers(0, n_items, size=int(rng.integers(1, 4))).tolist()))
         for _ in range(int(rng.integers(2, 6)))]
        for _ in range(n_users)
    ]  # fmt: skip


def test_from_sequences_is_the_documented_layout():
    # The worked example of the module docstring: u0 {3, 5} then {5}; u1 {1}.
    data = from_sequences([[[5, 3, 3], [], [5]], [[1]]])  # duplicates and empty baskets go
    assert data.items.tolist() == [3, 5, 5, 1]
    assert data.basket_offsets.tolist() == [0, 2, 3, 4] and data.user_offsets.tolist() == [0, 2, 3]
    assert (data.n_users, data.n_items, data.n_baskets) == (2, 6, 3)  # n_items: largest index + 1
    assert data.user_ids.tolist() == ["0", "1"] and data.item_ids.tolist() == [str(i) for i in range(6)]
    assert (data.basket_times == NO_TIME).all() and data.user_part.tolist() == [-1, -1]
    assert not data.has_predefined_split and data.n_baskets_per_user.tolist() == [2, 1]
    assert [b.tolist() for b in data.user_baskets(0)] == [[3, 5], [5]]
    assert data.user_index() == {"0": 0, "1": 1}
    assert from_sequences([[[1]]], n_items=4).n_items == 4
    data.validate()


def test_ranges_is_the_concatenation_of_aranges():
    assert ranges(np.array([10, 3]), np.array([2, 3])).tolist() == [10, 11, 3, 4, 5]
    assert ranges(np.array([4, 7]), np.array([0, 0])).tolist() == []
    rng = np.random.default_rng(1)
    starts, lengths = rng.integers(0, 50, 20), rng.integers(0, 5, 20)
    expected = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
    np.testing.assert_array_equal(ranges(starts, lengths), expected)
    with pytest.raises(ValueError, match="negative length"):
        ranges(np.array([0]), np.array([-1]))


def test_histories_and_targets_are_the_baskets_of_the_lists():
    seqs = random_sequences()
    data = from_sequences(seqs)
    rng = np.random.default_rng(2)
    users = rng.integers(0, len(seqs), 15)
    n_history = np.array([int(rng.integers(1, len(seqs[u]))) for u in users])
    h = data.histories(users, n_history)
    assert h.n == len(users)
    for i, (u, n) in enumerate(zip(users, n_history)):
        baskets = [h.baskets.row(b).tolist() for b in range(h.basket_offsets[i], h.basket_offsets[i + 1])]
        assert baskets == seqs[u][:n]
        assert h.items_per_instance().row(i).tolist() == [x for b in seqs[u][:n] for x in b]
    targets = data.targets(users, n_history)
    assert [targets.row(i).tolist() for i in range(len(users))] == [seqs[u][n] for u, n in zip(users, n_history)]
    # With `first`: n baskets from basket number first on.
    first = np.array([len(seqs[u]) - n for u, n in zip(users, n_history)])
    late = data.histories(users, n_history, first)
    for i, (u, n) in enumerate(zip(users, n_history)):
        assert late.items_per_instance().row(i).tolist() == [x for b in seqs[u][-n:] for x in b]


def test_save_then_load_gives_the_same_dataset(tmp_path):
    times = np.arange(7, dtype=np.int64) * 86_400 * 10**9
    data = from_sequences([[[0, 2], [1]], [[2], [0], [1, 2]], [[1], [0]]],
                          user_part=np.array([0, 1, 2], dtype=np.int8), meta={"source": "x.csv"})  # fmt: skip
    data = BasketData(**{**vars(data), "basket_times": times})
    data.save(tmp_path / "ds")
    back = BasketData.load(tmp_path / "ds")
    for name in ("items", "basket_offsets", "user_offsets", "basket_times", "user_ids", "item_ids", "user_part"):
        np.testing.assert_array_equal(getattr(back, name), getattr(data, name), err_msg=name)
        assert getattr(back, name).dtype.kind == getattr(data, name).dtype.kind, name
    assert back.meta["source"] == "x.csv" and back.has_predefined_split
    assert (back.meta["format"], back.meta["n_users"], back.meta["n_baskets"], back.meta["n_entries"]) == (
        "basketgnn-dataset", 3, 7, 9,
    )


def test_load_refuses_what_is_not_a_dataset_of_this_format(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="is not a prepared dataset \\(no meta.json inside\\)"):
        BasketData.load(tmp_path / "empty")
    from_sequences([[[0], [1]]]).save(tmp_path / "ds")
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    (tmp_path / "ds" / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(UserError, match="version 99 is not 'basketgnn-dataset' version 1; prepare the data again"):
        BasketData.load(tmp_path / "ds")


def test_save_never_replaces_a_folder_that_is_not_a_dataset(tmp_path):
    data = from_sequences([[[0], [1]]])
    victim = tmp_path / "runs"
    (victim / "dnntsp").mkdir(parents=True)
    (victim / "dnntsp" / "best.pt").write_text("precious")
    with pytest.raises(UserError, match="exists and is not a prepared dataset; refusing to replace it"):
        data.save(victim)
    assert (victim / "dnntsp" / "best.pt").read_text() == "precious"
    (tmp_path / "file").write_text("a file")
    with pytest.raises(UserError, match="refusing to replace it"):
        data.save(tmp_path / "file")
    assert (tmp_path / "file").read_text() == "a file"
    (tmp_path / "empty").mkdir()
    data.save(tmp_path / "empty")  # an empty folder is used
    other = from_sequences([[[1], [0], [1]]])
    other.save(tmp_path / "empty")  # and a dataset is replaced
    assert BasketData.load(tmp_path / "empty").n_baskets == 3


def test_aligned_to_renumbers_by_original_id_and_drops_unknown_items():
    seqs = [[[0, 1], [2]], [[3], [1, 3]], [[2], [0]]]
    data = from_sequences(seqs)
    data = BasketData(**{**vars(data), "item_ids": np.array(["a", "b", "c", "d"]),
                         "basket_times": np.arange(6, dtype=np.int64)})  # fmt: skip
    same, dropped = data.aligned_to(np.array(["a", "b", "c", "d"]))
    assert same is data and dropped == 0
    catalogue = np.array(["c", "x", "a", "b"])  # "d" unknown there; "x" not in the data
    aligned, dropped = data.aligned_to(catalogue)
    assert dropped == 2  # both entries of "d"
    index = {k: i for i, k in enumerate(catalogue.tolist())}
    names = ["a", "b", "c", "d"]
    expected = [[sorted(index[names[i]] for i in b if names[i] in index) for b in user] for user in seqs]
    expected = [[b for b in user if b] for user in expected]  # user 1's basket {d} is gone
    got = [[sorted(b.tolist()) for b in aligned.user_baskets(u)] for u in range(aligned.n_users)]
    assert got == expected
    assert aligned.item_ids.tolist() == catalogue.tolist() and aligned.user_ids.tolist() == ["0", "1", "2"]
    assert aligned.basket_times.tolist() == [0, 1, 3, 4, 5]  # the times of the kept baskets
    aligned.validate()


@pytest.mark.parametrize(
    ("change", "broken"),
    [
        (lambda d: {"basket_offsets": d.basket_offsets + 1}, "basket_offsets starts at 0"),
        (lambda d: {"user_offsets": d.user_offsets[:-1]}, "user_offsets starts at 0 and ends at n_baskets"),
        (lambda d: {"items": np.where(d.items == 0, 7, d.items).astype(np.int32)}, "item indices are in range"),
        (lambda d: {"basket_times": d.basket_times[:-1]}, "one time per basket"),
        (lambda d: {"user_part": d.user_part[:-1]}, "one part code per user"),
    ],
)
def test_validate_names_the_broken_invariant(change, broken):
    data = from_sequences([[[0, 1], [2]], [[1], [0], [2]]])
    with pytest.raises(ValueError, match=f"invalid BasketData: .*{broken}"):
        BasketData(**{**vars(data), **change(data)}).validate()
