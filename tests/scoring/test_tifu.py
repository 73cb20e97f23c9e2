"""The shared TIFU machinery (scoring/tifu.py); TIFU-KNN's vectors, search and tuning are
checked against loops in tests/recommenders/test_tifu_knn.py, the fusion in test_fusion.py."""

from __future__ import annotations

import numpy as np

from basketgnn.scoring.tifu import SparseScores, keep_top


def test_keep_top_ties_go_to_the_lower_column():
    x = np.array([[0.5, 0.2, 0.5, 0.5, 0.1], [0.0, 0.3, 0.0, 0.0, 0.0], [1, 2, 3, 4, 5.0]])
    got = keep_top(x, 2)
    assert got.sum(axis=1).tolist() == [2, 2, 2]
    assert got[0].tolist() == [True, False, True, False, False]  # three 0.5s: the first two
    assert got[1].tolist() == [True, True, False, False, False]  # 0.3, then the first 0.0
    assert got[2].tolist() == [False, False, False, True, True]
    assert keep_top(x, 5).all() and keep_top(x, 9).all()


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
