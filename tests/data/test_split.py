"""Splits: predefined, seeded random (saved and reloaded), temporal leave-last-basket-out."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import load_split, make_split, random_user_split, save_split
from basketgnn.errors import UserError

SEQS = [[[0], [1], [2], [3]], [[1], [2]], [[0, 1], [2], [3]], [[4], [0], [1], [2], [3]]]


def test_temporal_split_targets_and_histories():
    data = from_sequences(SEQS)
    sp = make_split(data, "temporal")
    assert sp["test"].users.tolist() == [0, 1, 2, 3]
    assert sp["test"].n_history.tolist() == [3, 1, 2, 4]
    assert sp["validate"].users.tolist() == [0, 2, 3]
    assert sp["train"].users.tolist() == [0, 3]
    assert sp["train"].n_history.tolist() == [1, 2]
    # the validation target of user 2 is its second basket {2}
    t = data.targets(sp["validate"].users, sp["validate"].n_history)
    assert t.row(1).tolist() == [2]
    h = data.histories(sp["test"].users, sp["test"].n_history)
    assert h.items_per_instance().row(2).tolist() == [0, 1, 2]


def test_random_split_is_seeded_disjoint_and_reloadable(tmp_path):
    data = from_sequences(SEQS * 25)
    a, b = random_user_split(data, seed=1), random_user_split(data, seed=1)
    assert all(np.array_equal(a[p].users, b[p].users) for p in a.parts)
    assert not np.array_equal(a["train"].users, random_user_split(data, seed=2)["train"].users)
    all_users = np.concatenate([a[p].users for p in a.parts])
    assert sorted(all_users.tolist()) == list(range(data.n_users))
    save_split(a, data, tmp_path / "split.json")
    c = load_split(tmp_path / "split.json", data)
    assert c.name == a.name and all(np.array_equal(a[p].users, c[p].users) for p in a.parts)


def test_predefined_split_requires_parts():
    with pytest.raises(UserError, match="no predefined split"):
        make_split(from_sequences(SEQS), "predefined")
    parts = np.array([0, 0, 1, 2], dtype=np.int8)
    sp = make_split(from_sequences(SEQS, user_part=parts))
    assert sp.name == "predefined" and sp["test"].users.tolist() == [3]


def test_split_too_small_is_a_clear_error():
    with pytest.raises(UserError, match="leaves no instance in train"):
        make_split(from_sequences([[[0], [1]], [[1], [2]]]), "temporal")


def test_prefix_instances():
    from basketgnn.data.split import Instances, prefix_instances

    p = prefix_instances(Instances(np.array([5, 7]), np.array([3, 1])))
    assert p.users.tolist() == [5, 5, 5, 7] and p.n_history.tolist() == [1, 2, 3, 1]


def test_loaded_split_must_fit_the_data(tmp_path):
    data = from_sequences(SEQS * 25)
    sp = random_user_split(data, seed=1)
    save_split(sp, data, tmp_path / "split.json")
    shorter = from_sequences([s[:2] for s in SEQS] * 25)  # same customers, fewer baskets
    with pytest.raises(UserError, match="the split was made for other data"):
        load_split(tmp_path / "split.json", shorter)


def test_users_without_history_are_left_out_of_last_basket_splits():
    # User 1 has a single basket (e.g. after aligning to another catalogue): no history.
    data = from_sequences(
        [[[0], [1]], [[2]], [[0], [1], [2]], [[1], [2]]], user_part=np.array([0, 0, 2, 1], np.int8)
    )
    sp = make_split(data, "predefined")
    assert sp["train"].users.tolist() == [0] and sp["train"].n_history.tolist() == [1]
    assert sp["test"].users.tolist() == [2] and sp["test"].n_history.tolist() == [2]
