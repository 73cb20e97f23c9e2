"""The collate's counting sorts (``graph.collate_kernel``) against NumPy's sorts, element for
element: ``np.argsort(kind="stable")`` and ``np.unique`` with first positions and inverse."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.graph.collate_kernel import stable_order, unique_pairs


@pytest.mark.parametrize("n, n_keys", [(0, 0), (0, 5), (1, 1), (50, 3), (2000, 700), (300, 10_000)])
def test_stable_order_is_the_stable_argsort(n, n_keys):
    keys = np.random.default_rng(n + n_keys).integers(0, max(n_keys, 1), size=n).astype(np.int64)
    np.testing.assert_array_equal(stable_order(keys, n_keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("n, n_major, n_minor", [(0, 0, 1), (1, 1, 1), (40, 5, 1), (500, 30, 4), (3000, 4000, 60)])
def test_unique_pairs_is_numpys_unique_of_the_combined_key(n, n_major, n_minor):
    rng = np.random.default_rng(n)
    major = rng.integers(0, max(n_major, 1), size=n).astype(np.int64)
    minor = rng.integers(0, n_minor, size=n).astype(np.int64)
    first, inverse = unique_pairs(major, minor, n_major, n_minor)
    _, want_first, want_inverse = np.unique(major * n_minor + minor, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(first, want_first)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
    if n > n_major * n_minor:
        assert len(first) < n  # pairs repeat: the runs are merged
