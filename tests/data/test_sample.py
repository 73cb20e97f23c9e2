"""The training sample of customers: seeded, by id, the same on a rerun, validation drawn from
the sample, the test part whole."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.sample import customer_keys, sample_split, sampled_customers
from basketgnn.data.split import make_split
from basketgnn.errors import UserError


def _data(n_users: int = 200):
    rng = np.random.default_rng(0)
    seqs = [[[int(rng.integers(10))] for _ in range(int(rng.integers(4, 7)))] for _ in range(n_users)]
    return from_sequences(seqs, n_items=10)


def test_sample_is_seeded_and_sized():
    ids = np.array([f"c{i}" for i in range(1000)])
    a, b = sampled_customers(ids, 100, seed=0), sampled_customers(ids, 100, seed=0)
    assert a.sum() == 100 and np.array_equal(a, b)
    other = sampled_customers(ids, 100, seed=1)
    assert other.sum() == 100 and not np.array_equal(a, other)
    assert sampled_customers(ids, 5000, seed=0).all()
    with pytest.raises(UserError, match="at least 1"):
        sampled_customers(ids, 0, seed=0)


def test_sample_follows_ids_not_rows():
    """Reordered or grown logs keep the customers they share in the sample (keys are per id)."""
    ids = np.array([f"c{i}" for i in range(1000)])
    perm = np.random.default_rng(2).permutation(1000)
    a = set(ids[sampled_customers(ids, 100, 0)])
    assert set(ids[perm][sampled_customers(ids[perm], 100, 0)]) == a
    grown = np.concatenate([ids, [f"new{i}" for i in range(50)]])
    b = set(grown[sampled_customers(grown, 100, 0)])
    # The grown log's sample holds only old-sample customers and newcomers with smaller keys.
    newcomers = {c for c in b if c.startswith("new")}
    assert b - newcomers <= a and len(a - b) == len(newcomers)
    keys = dict(zip(grown, customer_keys(grown, 0)))
    assert max(keys[c] for c in b) < min(keys[c] for c in set(grown) - b)


@pytest.mark.parametrize("kind", ["temporal", "random"])
def test_split_restricted_to_the_sample_test_whole(kind):
    data = _data()
    sp = make_split(data, kind, 0)
    sampled, info = sample_split(sp, data, 50, seed=3)
    mask = sampled_customers(data.user_ids, 50, 3)
    for part in ("train", "validate"):
        assert mask[sampled[part].users].all()
        # Every sampled customer's instance of that part is kept, with its history length.
        full = sp[part]
        keep = mask[full.users]
        assert np.array_equal(sampled[part].users, full.users[keep])
        assert np.array_equal(sampled[part].n_history, full.n_history[keep])
    assert sampled["test"] is sp["test"]
    assert (info.sampled, info.customers, info.seed) == (50, 200, 3)
    assert info.train == len(sampled["train"]) and info.train_before == len(sp["train"])
    assert "50 of 200 customers (seed 3)" in info.describe()


def test_sampling_everyone_is_the_split_itself():
    data = _data(30)
    sp = make_split(data, "temporal")
    same, info = sample_split(sp, data, 1000)
    assert same is sp and info.sampled == 30


def test_a_sample_without_validation_customers_is_a_clear_error():
    data = _data(40)
    sp = make_split(data, "random", 0)
    mask_users = set(np.flatnonzero(sampled_customers(data.user_ids, 1, 0)))
    part = "validate" if not mask_users & set(sp["validate"].users.tolist()) else "train"
    with pytest.raises(UserError, match=f"leaves no {part} customers"):
        sample_split(sp, data, 1, seed=0)


def test_ids_are_text_whatever_their_dtype():
    data = _data(20)
    as_int = dataclasses.replace(data, user_ids=np.arange(20))
    assert np.array_equal(sampled_customers(as_int.user_ids, 5, 0), sampled_customers(data.user_ids, 5, 0))
