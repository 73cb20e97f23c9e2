"""The compiled weighted union of sparse rows against dense rows summed part by part, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import _offsets
from basketgnn.scoring.sparse import SparseScores
from tests.support.scoring import assert_same


@pytest.mark.parametrize("seed", range(4))
def test_weighted_sum_is_the_dense_sum_bit_for_bit(seed):
    """Two parts, and three (added one at a time): against dense rows summed part by part,
    (0 + w_a · a) + w_b · b (+ w_c · c), on the union of the parts' items."""
    rng = np.random.default_rng(seed)

    def part(n, n_items):
        counts = rng.integers(0, 8, size=n)
        items = np.concatenate([np.sort(rng.choice(n_items, c, replace=False)) for c in counts]).astype(np.int64)
        return SparseScores(_offsets(counts), items, rng.uniform(0.01, 1, size=len(items)))

    a, b, c = part(50, 20), part(50, 20), part(50, 20)
    for parts in ([(0.1, a), (0.05, b)], [(0.1, a), (0.05, b), (0.3, c)]):
        got = SparseScores.weighted_sum(parts)
        dense = np.zeros((50, 20))
        for w, p in parts:
            dense = p.add_to(dense.copy(), w)  # dense + w · p, part after part
        rows, items = np.nonzero(np.any([p.add_to(np.zeros((50, 20)), 1.0) > 0 for _, p in parts], axis=0))
        assert_same(got, SparseScores(_offsets(np.bincount(rows, minlength=50)), items, dense[rows, items]))
