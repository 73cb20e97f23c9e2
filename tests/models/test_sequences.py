"""Padded basket sequences: the docstring's worked example, caps, targets, and a loop reference."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.models.sequences import sequence_batches


def test_worked_example():
    data = from_sequences([[[3, 5], [5], [1, 2, 4], [0]]], n_items=6)
    batch = sequence_batches(data, Instances(np.array([0]), np.array([3])), max_len=2, max_basket_items=2).collate(
        np.array([0])
    )
    assert batch.items.tolist() == [[[6, 0], [2, 3]]]
    assert batch.basket_mask.tolist() == [[True, True]]
    assert batch.lengths.tolist() == [2]
    assert batch.target_items.tolist() == [0] and batch.target_offsets.tolist() == [0, 1]


def test_without_targets_and_lengths_for_bucketing():
    data = from_sequences([[[1], [2], [3]], [[4], [5]]], n_items=6)
    source = sequence_batches(data, Instances(np.array([0, 1, 0]), np.array([2, 1, 1])), max_len=5)
    assert source.lengths.tolist() == [2, 1, 1] and len(source) == 3
    batch = source.collate(np.array([1, 0]), with_targets=False)
    assert batch.target_items is None and batch.target_offsets is None
    assert batch.items[:, :, 0].tolist() == [[5, 0], [2, 3]]
    assert batch.basket_mask.tolist() == [[True, False], [True, True]]


def test_matches_a_loop_over_users_on_random_data():
    rng = np.random.default_rng(0)
    sequences = [
        [list(rng.choice(30, size=rng.integers(1, 9), replace=False)) for _ in range(rng.integers(2, 12))]
        for _ in range(40)
    ]
    data = from_sequences(sequences, n_items=30)
    users = rng.integers(0, 40, size=25)
    h = np.array([rng.integers(1, len(sequences[u])) for u in users])
    max_len, cap = 4, 3
    source = sequence_batches(data, Instances(users, h), max_len=max_len, max_basket_items=cap)
    idx = rng.permutation(25)[:17]
    batch = source.collate(idx)
    T, L = batch.items.shape[1:]
    targets = np.split(batch.target_items.numpy(), batch.target_offsets.numpy()[1:-1])
    for row, i in enumerate(idx):
        baskets = [sorted(set(b)) for b in sequences[users[i]]]
        kept = baskets[: h[i]][-max_len:]
        expected = np.zeros((T, L), dtype=np.int64)
        for t, basket in enumerate(kept):
            expected[t, : min(len(basket), cap)] = np.array(basket[:cap]) + 1
        assert (batch.items[row].numpy() == expected).all()
        assert batch.lengths[row] == len(kept)
        assert batch.basket_mask[row].tolist() == [t < len(kept) for t in range(T)]
        assert targets[row].tolist() == baskets[h[i]]
    assert L == min(cap, max(len(b) for i in idx for b in sequences[users[i]][: h[i]][-max_len:]))


def test_rejects_non_positive_sizes():
    data = from_sequences([[[1], [2]]])
    with pytest.raises(ValueError, match="must be >= 1"):
        sequence_batches(data, Instances(np.array([0]), np.array([1])), max_len=0)
