"""Candidate top-k: the same items, values and ties as ranking the dense fused matrix."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import _offsets
from basketgnn.metrics import top_k
from basketgnn.scoring.candidates import SharedScores, fused_top_k, sigmoid
from basketgnn.scoring.fusion import fuse
from basketgnn.scoring.sparse import SparseScores


def random_shared(rng, n, n_items, per_row, levels=None, scale=3.0):
    """Shared scores with up to ``per_row`` own entries a row; ``levels`` quantises the
    values so that ties are everywhere (also between a row's own and shared entries)."""
    base = rng.normal(size=n_items) * scale
    counts = rng.integers(0, per_row + 1, size=n)
    items = np.concatenate([rng.choice(n_items, c, replace=False) for c in counts]).astype(np.int64)
    values = rng.normal(size=len(items)) * scale
    if levels is not None:
        base, values = np.round(base * levels) / levels, np.round(values * levels) / levels
    return SharedScores(base.astype(np.float32), _offsets(counts), items, values.astype(np.float32))


def random_tifu(rng, n, n_items, per_row, levels=None):
    counts = rng.integers(0, per_row + 1, size=n)
    items = np.concatenate([np.sort(rng.choice(n_items, c, replace=False)) for c in counts]).astype(np.int64)
    values = rng.uniform(0.01, 1.0, size=len(items))
    if levels is not None:
        values = np.ceil(values * levels) / levels
    return SparseScores(_offsets(counts), items, values)


def dense_top_k(scores, tifu, weight, k):
    dense = fuse(scores.dense(), tifu, weight, "sigmoid") if weight > 0 else scores.dense()
    idx = top_k(dense, k)
    return idx, np.take_along_axis(dense, idx, axis=1)


@pytest.mark.parametrize("weight", [0.0, 0.05, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("levels", [None, 2])
@pytest.mark.parametrize("n_items, k", [(300, 20), (40, 10), (25, 25)])
def test_fused_top_k_equals_the_dense_ranking(weight, levels, n_items, k):
    rng = np.random.default_rng(n_items + k + int(weight * 100))
    n = 60
    scores = random_shared(rng, n, n_items, per_row=12, levels=levels)
    tifu = random_tifu(rng, n, n_items, per_row=15, levels=levels)
    want_items, want_values = dense_top_k(scores, tifu, weight, k)
    items, values = fused_top_k(scores, k, tifu if weight > 0 else None, weight)
    np.testing.assert_array_equal(items, want_items)
    np.testing.assert_array_equal(values, want_values)  # bit for bit
    assert values.dtype == (np.float64 if weight > 0 else np.float32)


def test_saturated_sigmoids_tie_and_go_to_the_lower_item():
    """Logits of 40 and 50 both have sigmoid 1.0 in float64: fused they tie, and the lower
    item must win even though its logit is the smaller one."""
    base = np.array([0.0, 50.0, 40.0, 45.0, -3.0, 1.0], np.float32)
    scores = SharedScores(base, np.array([0, 1, 1]), np.array([0]), np.array([60.0], np.float32))
    tifu = SparseScores(np.array([0, 0, 1]), np.array([5]), np.array([0.5]))
    items, _ = fused_top_k(scores, 4, tifu, 0.2)
    want, _ = dense_top_k(scores, tifu, 0.2, 4)
    np.testing.assert_array_equal(items, want)
    assert items[0].tolist() == [0, 1, 2, 3]  # all four at (1 - 0.2) · 1.0: by item


def test_rows_without_entries_and_an_empty_batch():
    rng = np.random.default_rng(3)
    scores = random_shared(rng, 5, 30, per_row=0)
    items, _ = fused_top_k(scores, 7)
    np.testing.assert_array_equal(items, np.repeat(top_k(scores.base[None], 7), 5, axis=0))
    empty = SharedScores(scores.base, np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    tifu = SparseScores(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
    items, values = fused_top_k(empty, 7, tifu, 0.5)
    assert items.shape == (0, 7) and values.shape == (0, 7)


def test_fused_needs_the_tifu_rows():
    scores = random_shared(np.random.default_rng(0), 3, 10, per_row=2)
    with pytest.raises(ValueError, match="TIFU scores for 0 rows"):
        fused_top_k(scores, 3, None, 0.5)


def test_sigmoid_does_not_depend_on_where_a_value_sits():
    x = np.random.default_rng(0).normal(size=1001) * 8
    whole = sigmoid(x)
    assert all(whole[i] == sigmoid(x[i : i + 1])[0] for i in range(0, 1001, 7))
    assert sigmoid(np.array([-1000.0, 0.0, 1000.0])).tolist() == [0.0, 0.5, 1.0]


def test_a_block_of_rows_ranks_as_those_rows_of_the_whole():
    rng = np.random.default_rng(5)
    scores, tifu = random_shared(rng, 50, 80, per_row=10, levels=2), random_tifu(rng, 50, 80, per_row=12)
    whole = fused_top_k(scores, 10, tifu, 0.3)
    for a, b in ((0, 50), (0, 17), (17, 50), (23, 24), (30, 30)):
        block = scores.rows(a, b)
        np.testing.assert_array_equal(block.dense(), scores.dense()[a:b])
        items, values = fused_top_k(block, 10, tifu.rows(a, b), 0.3)
        np.testing.assert_array_equal(items, whole[0][a:b])
        np.testing.assert_array_equal(values, whole[1][a:b])
