"""The compiled primitives shared by the scoring kernels: selection against a sort, the
unrolled scatter against the plain loop, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.scoring import select_kernel


@pytest.mark.parametrize("count, m", [(10, 3), (50, 50), (40, 60), (700, 200), (7000, 100), (7000, 1), (3000, 5),
                                      (7000, 300), (0, 4), (5, 0)])  # fmt: skip
@pytest.mark.parametrize("ids_order", ["ascending", "shuffled"])
@pytest.mark.parametrize("keys_kind", ["ties", "distinct", "sorted", "all-equal", "periodic"])
def test_smallest_is_the_first_m_of_a_sort_by_key_then_id(count, m, ids_order, keys_kind):
    """Including keys whose sample misleads the threshold: "periodic" puts the smallest keys at
    exactly the sampled positions, so too few keys pass and the threshold is raised (for m =
    300 until every key is kept)."""
    rng = np.random.default_rng(count + m)
    periodic = np.ones(count)
    periodic[:: max(1, count // select_kernel.SAMPLE)] = np.round(rng.random(len(periodic[:: max(1, count // select_kernel.SAMPLE)])) * 3) / 10
    keys = {
        "ties": np.round(rng.random(count) * 20) / 20,
        "distinct": rng.random(count),
        "sorted": np.sort(rng.random(count))[::-1].copy(),
        "all-equal": np.full(count, 0.5),
        "periodic": periodic,
    }[keys_kind]
    ids = np.arange(count) * 3 if ids_order == "ascending" else rng.permutation(count * 3)[:count]
    pos, out, work = np.empty(max(count, 1), np.int64), np.empty(max(m, 1), np.int64), np.empty(max(count, 1))
    n = select_kernel.smallest_positions(keys, ids.astype(np.int64), count, m, pos, out, work)
    want = sorted(sorted(range(count), key=lambda c: (keys[c], ids[c]))[:m])
    assert n == min(count, m)
    assert out[:n].tolist() == want


@pytest.mark.parametrize("n, ties", [(1, False), (2, True), (9, False), (256, False), (312, True), (500, True)])
def test_select_is_the_kth_of_a_sort(n, ties):
    """The branch-free quickselect against np.sort, for every rank (runs of equal values: the
    equal-values pass)."""
    rng = np.random.default_rng(n)
    a = np.round(rng.random(n) * 5) / 5 if ties else rng.random(n)
    for k in range(0, n, max(1, n // 40)):
        work = a.copy()
        assert select_kernel.kth_smallest(work, n, k) == np.sort(a)[k]
        np.testing.assert_array_equal(np.sort(work), np.sort(a))  # only reordered


@pytest.mark.parametrize("length", range(10))
def test_scatter_is_the_sequential_sum(length):
    """The unrolled acc[idx[e]] += scale · val[e] against the plain loop, bit for bit, for each
    remainder of the unrolling; repeated indices (each add reads the previous store)."""
    rng = np.random.default_rng(length)
    idx = rng.integers(0, 4, size=length + 3).astype(np.int32)
    val = rng.random(length + 3).astype(np.float32)
    got = rng.random(4)
    want = got.copy()
    select_kernel.scatter_add(got, idx, val, 2, 2 + length, 0.3)
    for e in range(2, 2 + length):
        want[idx[e]] += 0.3 * np.float64(val[e])
    np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
