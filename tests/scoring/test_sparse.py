"""Sparse score rows: the kept top entries, row blocks, and the weighted sum of parts."""

from __future__ import annotations

import numpy as np

from basketgnn.scoring.sparse import SparseScores


def test_top_scaled_rows_and_concat():
    x = np.array([[0.0, 2.0, 1.0, 4.0], [0.0, 0.0, 0.0, 0.0], [3.0, 3.0, 0.0, 1.0]], np.float32)
    s = SparseScores.top_scaled(x, 2)
    np.testing.assert_array_equal(s.offsets, [0, 2, 2, 4])  # no positive entry: an empty row
    np.testing.assert_array_equal(s.items, [1, 3, 0, 1])
    np.testing.assert_allclose(s.values, [0.5, 1.0, 1.0, 1.0])
    both = SparseScores.concat([s.rows(0, 1), s.rows(1, 3)])
    for a, b in zip((both.offsets, both.items, both.values), (s.offsets, s.items, s.values)):
        np.testing.assert_array_equal(a, b)
    dense = s.add_to(np.ones((3, 4)), 0.5)
    np.testing.assert_allclose(dense[0], [1.0, 1.25, 1.0, 1.5])


def test_weighted_sum_is_the_dense_sum():
    rng = np.random.default_rng(0)

    def rand(n, n_items, per_row):
        counts = rng.integers(0, per_row + 1, size=n)
        items = np.concatenate([np.sort(rng.choice(n_items, c, replace=False)) for c in counts]).astype(np.int64)
        return SparseScores(np.r_[0, np.cumsum(counts)].astype(np.int64), items, rng.uniform(0.1, 1, len(items)))

    a, b = rand(7, 20, 6), rand(7, 20, 9)
    got = SparseScores.weighted_sum([(0.3, a), (0.05, b)])
    dense = lambda s: s.add_to(np.zeros((7, 20)), 1.0)  # noqa: E731
    np.testing.assert_allclose(dense(got), 0.3 * dense(a) + 0.05 * dense(b), rtol=1e-15)
    # On the union of items; with weights (1, 0) / (0, 1) each part's values exactly.
    np.testing.assert_array_equal(dense(got) > 0, (dense(a) > 0) | (dense(b) > 0))
    np.testing.assert_array_equal(dense(SparseScores.weighted_sum([(1.0, a), (0.0, b)])), dense(a))
    np.testing.assert_array_equal(dense(SparseScores.weighted_sum([(0.0, a), (1.0, b)])), dense(b))
    # No rows, or rows without entries (a half of one customer on two threads).
    empty = SparseScores(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
    got_empty = SparseScores.weighted_sum([(0.3, empty), (0.05, empty)])
    assert len(got_empty) == 0 and len(got_empty.items) == 0
    blank = SparseScores(np.zeros(4, np.int64), np.zeros(0, np.int64), np.zeros(0))
    got_blank = SparseScores.weighted_sum([(0.3, blank), (0.05, blank)])
    assert len(got_blank) == 3 and len(got_blank.items) == 0
    # An item kept by one part only carries exactly that part's weighted value.
    one = SparseScores.weighted_sum([(0.3, a)])
    np.testing.assert_array_equal(one.values, 0.3 * a.values)
