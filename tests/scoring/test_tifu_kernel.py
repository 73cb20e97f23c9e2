"""TIFU-KNN's compiled kernels against the batch NumPy / SciPy formulation, bit for bit (the
same float operations in the same order): the kept scores of the fusion's scorer, the
tuning ranks and the decayed customer vectors. The batch formulation is the library's own
(``query_chunks``, ``NeighbourIndex.mean``, ``combine``, ``SparseScores.top_scaled``), which
TIFU-KNN's dense scores and the neighbour add-on use."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.scoring import tifu, tifu_kernel
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.select_kernel import SAMPLE
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import (
    NeighbourIndex,
    SparseRows,
    TifuParams,
    combine,
    customer_codes,
    customer_vectors,
    pool_vectors,
    query_chunks,
    query_codes,
)
from tests.support.scoring import assert_same, instances, skewed_data


def batch_tifu(scorer, data, query, alphas):
    """TifuScorer.scores by the batch formulation: dense blocks of queries."""
    p = scorer.params
    own = customer_vectors(data.histories(query.users, query.n_history), data.n_items, p.m, p.r_b, p.r_g)
    _, codes = customer_codes(scorer.customer_ids, data.user_ids[query.users])
    top = min(scorer.top, data.n_items)
    parts = {a: [] for a in alphas}
    for _, own_dense, nbrs in query_chunks(scorer._index, own, codes, p.k):
        mean = scorer._index.mean(nbrs)
        for a in alphas:
            parts[a].append(SparseScores.top_scaled(combine(own_dense, mean, a), top, np.float64))
    return {a: SparseScores.concat(parts[a]) for a in alphas}


@pytest.mark.parametrize(
    "n_items, max_basket, k, top",
    [
        (30, 6, 5, 200),  # small catalogue: candidates listed by a catalogue scan
        (2000, 3, 7, 200),  # large catalogue: candidates listed as they come
        (2000, 3, 7, 3),  # ties at the top's cut
        (60, 40, 500, 10),  # k beyond the pool: every other customer is a neighbour
        (100, 30, 20, 4),  # a catalogue scan with many positive values: a threshold lists a few
    ],
)
def test_tifu_kernel_equals_the_batch_search_bit_for_bit(n_items, max_basket, k, top):
    data = skewed_data(n_items + k, 80, n_items, max_basket)
    train = instances(data, np.arange(60), back=1)
    # Queries: new customers, and training customers (never their own neighbours).
    query = Instances(np.r_[np.arange(60, 80), np.arange(0, 60, 7)],
                      np.r_[data.n_baskets_per_user[60:80], data.n_baskets_per_user[0:60:7] - 1])  # fmt: skip
    scorer = TifuScorer.build(data, train, TifuParams(k=k, m=2, r_b=0.9, r_g=0.7, alpha=0.3), top)
    # α = 1 (the own vector alone, listed from the customer's own items) first, inside and last.
    for alphas in ((0.3, 0.0, 1.0, 0.8), (1.0, 0.3), (0.0, 1.0)):
        got, want = scorer.scores(data, query, alphas, exact_sums=True), batch_tifu(scorer, data, query, alphas)
        for a in alphas:
            assert_same(got[a], want[a])
        for exact in (True, False):  # the neighbours' own sums, or the common rows' sum
            assert_same(scorer.scores(data, query, alphas, exact_sums=exact)[1.0], scorer.scores(data, query, (1.0,))[1.0])
        if 0.3 in alphas:
            assert max(len(np.unique(want[0.3].values)), 1) < len(want[0.3].values)  # equal values occur


@pytest.mark.parametrize("share", [0.0, 0.25, 2.0])  # every held item dense / the default / none
def test_dense_item_columns_give_the_scatters_bits(monkeypatch, share):
    """The distances add an item most pool rows hold as a dense column (0.0 where a row lacks
    it): the kept scores, neighbours and tuning ranks stay the batch search's bits."""
    monkeypatch.setattr(tifu, "DENSE_ITEM_SHARE", share)
    data = skewed_data(230, 80, 200, 8)
    train = instances(data, np.arange(60), back=1)
    query = Instances(np.arange(60, 80), data.n_baskets_per_user[60:80])
    scorer = TifuScorer.build(data, train, TifuParams(k=9, m=2, r_b=0.9, r_g=0.7, alpha=0.3), 50)
    slot, dense = scorer._index.dense_columns()
    held = np.diff(scorer._index._rows_t.indptr)
    assert (slot >= 0).sum() == (held > share * 60).sum() == len(dense)
    if share == 0.25:
        assert 0 < len(dense) < (held > 0).sum()  # both paths run
    got, want = scorer.scores(data, query, (0.3, 0.9), exact_sums=True), batch_tifu(scorer, data, query, (0.3, 0.9))
    for a in (0.3, 0.9):
        assert_same(got[a], want[a])
    # The neighbours and the tuning ranks: the same as with no dense column.
    own, _ = scorer.neighbours(data, query)
    index, users = scorer._index, query_codes(scorer._distinct_ids, data.user_ids[query.users])
    with_dense = index.kernel_neighbours(own, users, 9), index.ranked(own, users, (3, 9), (0.3,), 20)
    monkeypatch.setattr(tifu, "DENSE_ITEM_SHARE", 2.0)
    index._dense = None
    assert len(index.dense_columns()[1]) == 0
    np.testing.assert_array_equal(index.kernel_neighbours(own, users, 9), with_dense[0])
    np.testing.assert_array_equal(index.ranked(own, users, (3, 9), (0.3,), 20), with_dense[1])


def test_tifu_kernel_with_empty_histories():
    data = skewed_data(5, 40, 50, 5)
    train = instances(data, np.arange(30), back=1)
    query = Instances(np.arange(25, 40), np.r_[np.zeros(5, np.int64), data.n_baskets_per_user[30:40]])
    scorer = TifuScorer.build(data, train, TifuParams(k=4, m=3, alpha=0.5), 12)
    got, want = scorer.scores(data, query, exact_sums=True), batch_tifu(scorer, data, query, (0.5,))
    assert_same(got[0.5], want[0.5])
    assert np.diff(got[0.5].offsets)[:5].min() > 0  # no history: the neighbour mean alone


@pytest.mark.parametrize(
    "n_items, max_basket, ks",
    [(30, 6, (2, 5, 9)), (2000, 3, (1, 7)), (60, 40, (3, 500))],  # scan / listed candidates; k past the pool
)
def test_tuning_ranks_equal_the_batch_search(n_items, max_basket, ks):
    """``NeighbourIndex.ranked`` (tune_tifu's kernel) against top_k of the batch formulation,
    for nested k (prefixes of the nearest) and several α; with 2,000 items most rows have fewer
    than 20 positive scores, so the rest is filled with zero-score items, lowest first."""
    from basketgnn.metrics import top_k
    from basketgnn.scoring.tifu import NeighbourIndex, pool_vectors

    data = skewed_data(n_items + len(ks), 80, n_items, max_basket)
    train = instances(data, np.arange(60), back=1)
    query = Instances(np.r_[np.arange(60, 80), np.arange(0, 60, 7)],
                      np.r_[data.n_baskets_per_user[60:80], data.n_baskets_per_user[0:60:7] - 1])  # fmt: skip
    index = NeighbourIndex(pool_vectors(data, train, 2, 0.9, 0.7), train.users)
    own = customer_vectors(data.histories(query.users, query.n_history), n_items, 2, 0.9, 0.7)
    alphas, cut = (0.2, 0.0, 1.0), min(20, n_items)
    got = index.ranked(own, query.users, ks, alphas, cut)
    for rows, own_dense, nbrs in query_chunks(index, own, query.users, max(ks)):
        for i, k in enumerate(ks):
            mean = index.mean(nbrs[:, :k])
            for j, a in enumerate(alphas):
                np.testing.assert_array_equal(got[i, j][rows], top_k(combine(own_dense, mean, a), cut))


@pytest.mark.parametrize("m, r_b, r_g", [(2, 0.9, 0.7), (7, 1.0, 0.6), (1, 0.5, 0.5)])
def test_customer_vectors_equal_the_bincount_of_unique_keys(m, r_b, r_g):
    """``customer_vectors`` (compiled sums) against the NumPy formulation: weights of
    each (instance, item)'s entries summed in entry order by np.bincount; repeated items count
    again; empty histories give empty rows."""
    data = skewed_data(m, 60, 40, 8, repeats=True)
    n_history = np.r_[np.zeros(5, np.int64), data.n_baskets_per_user[5:]]
    hist = data.histories(np.arange(60), n_history)
    got = customer_vectors(hist, data.n_items, m, r_b, r_g)

    n_baskets = np.diff(hist.basket_offsets)
    owner = np.repeat(np.arange(60), n_baskets)
    back = hist.basket_offsets[owner + 1] - 1 - np.arange(len(owner))
    group, pos = back // m, back % m
    size = np.minimum(m, n_baskets[owner] - group * m)
    weight = np.power(r_g, group) * np.power(r_b, pos) / (size * -(-n_baskets // m)[owner])
    entry = hist.baskets.row_ids()
    uniq, inverse = np.unique(owner[entry] * data.n_items + hist.baskets.values, return_inverse=True)
    np.testing.assert_array_equal(got.indptr, np.searchsorted(uniq // data.n_items, np.arange(61)))
    np.testing.assert_array_equal(got.indices, uniq % data.n_items)
    np.testing.assert_array_equal(got.values, np.bincount(inverse, weights=weight[entry]))
    assert got.indptr[5] == 0


def test_tifu_kernel_without_alphas():
    """No α: the kernel runs (the scan path, a 30-item catalogue, where own and mean are cleared
    without an α's pass; not observable from outside a call) and keeps nothing."""
    from basketgnn.scoring.tifu import NeighbourIndex, pool_vectors

    data = skewed_data(3, 80, 30, 6)
    train = instances(data, np.arange(60), back=1)
    query = Instances(np.arange(60, 80), data.n_baskets_per_user[60:80])
    index = NeighbourIndex(pool_vectors(data, train, 2, 0.9, 0.7), train.users)
    own = customer_vectors(data.histories(query.users, query.n_history), data.n_items, 2, 0.9, 0.7)
    assert index.kept_scores(own, query.users, 5, (), 10) == {}


# --- the neighbour mean from the pool's common rows ------------------------------------------


def long_data(seed: int, n_users: int, n_items: int, max_basket: int, max_baskets: int):
    """Long histories (up to ``max_baskets`` baskets) of big baskets (up to ``max_basket``
    items) from a skewed catalogue: most customers share most neighbours."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_items + 1) ** 0.7
    p /= p.sum()
    sequences = [
        [sorted({int(i) for i in rng.choice(n_items, size=int(rng.integers(1, max_basket + 1)), p=p)})
         for _ in range(int(rng.integers(2, max_baskets + 1)))]
        for _ in range(n_users)
    ]  # fmt: skip
    return from_sequences(sequences, n_items=n_items)


@pytest.mark.parametrize(
    "n_items, max_basket, max_baskets, k, top",
    [
        (400, 150, 60, 20, 200),  # hundreds of items a basket, long histories
        (30, 6, 40, 5, 200),  # a small catalogue
        (2000, 3, 8, 7, 3),  # few entries: the neighbours' own sum is cheaper
        (60, 40, 12, 500, 10),  # k beyond the pool: every other customer is a neighbour
    ],
)
def test_common_rows_give_the_exact_sums_kept_scores(n_items, max_basket, max_baskets, k, top):
    """The default kept scores (each neighbour mean from the common rows' sum) against the
    exact sums: the same kept items (positivity is exact: counted, not summed), values equal
    up to float64 rounding."""
    data = long_data(n_items + k, 90, n_items, max_basket, max_baskets)
    train = instances(data, np.arange(70), back=1)
    query = Instances(np.r_[np.arange(70, 90), np.arange(0, 70, 3)],
                      np.r_[data.n_baskets_per_user[70:90], data.n_baskets_per_user[0:70:3] - 1])  # fmt: skip
    scorer = TifuScorer.build(data, train, TifuParams(k=k, m=3, r_b=0.9, r_g=0.7, alpha=0.3), top)
    alphas = (0.3, 0.0, 1.0)
    got, want = scorer.scores(data, query, alphas), scorer.scores(data, query, alphas, exact_sums=True)
    if k == 20:  # the base is what most means start from here
        index, entries = scorer._index, np.diff(scorer.vectors.indptr)
        own = customer_vectors(data.histories(query.users, query.n_history), n_items, 3, 0.9, 0.7)
        nbrs = index.kernel_neighbours(own, customer_codes(scorer.customer_ids, data.user_ids[query.users])[1], k)
        base = index.common_rows(k)[0]
        moved = [entries[np.setxor1d(n[n >= 0], base)].sum() < entries[n[n >= 0]].sum() for n in nbrs]
        assert np.mean(moved) > 0.5
    for a in alphas:
        np.testing.assert_array_equal(got[a].offsets, want[a].offsets)
        np.testing.assert_array_equal(got[a].items, want[a].items)
        np.testing.assert_allclose(got[a].values, want[a].values, rtol=1e-12, atol=0)


@pytest.mark.parametrize("queries", [2048, 16])
def test_common_rows_are_the_most_frequent_neighbours_with_their_sum(monkeypatch, queries):
    """The pool's rows found most often among the k nearest of its own rows (of every 4th
    row when at most 16 are searched), with their sum and per-item counts."""
    import basketgnn.scoring.tifu as tifu_module

    monkeypatch.setattr(tifu_module, "COMMON_QUERIES", queries)
    data = long_data(3, 80, 300, 60, 20)
    train = instances(data, np.arange(60), back=1)
    index = NeighbourIndex(pool_vectors(data, train, 2, 0.9, 0.7), train.users)
    k = 15
    rows, total, count = index.common_rows(k)
    ask = np.arange(60) if queries > 60 else np.arange(0, 60, 4)
    sub = index.vectors.dense(ask)
    asked = SparseRows(*(np.asarray(a) for a in (np.r_[0, np.cumsum((sub > 0).sum(1))], np.nonzero(sub)[1], sub[sub > 0])), 300)
    nearest = index.kernel_neighbours(asked, index.users[ask], k)
    often = np.bincount(nearest[nearest >= 0], minlength=index.vectors.n_rows)
    assert len(rows) == k and np.all(np.diff(rows) > 0)
    assert often[rows].min() >= np.delete(often, rows).max()  # no row outside is found more often
    dense = index.vectors.dense(rows)
    np.testing.assert_allclose(total, dense.sum(0), rtol=1e-13)
    np.testing.assert_array_equal(count, (dense > 0).sum(0))
    assert index.common_rows(k) is index.common_rows(k)  # computed once


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_from_base_against_the_dense_mean(seed):
    """``_mean_from_base`` for neighbour sets near the base, far from it and equal to it:
    written only when it reads fewer pool entries than the neighbours' own, then the dense
    mean up to rounding, exactly 0 where no neighbour holds the item."""
    from basketgnn.scoring.tifu_kernel import _mean_from_base

    rng = np.random.default_rng(seed)
    n_pool, n_items = 120, 500
    dense = np.where(rng.random((n_pool, n_items)) < 0.05, rng.random((n_pool, n_items)), 0.0)
    dense[:, :3] = 0.0  # items no pool row holds
    ptr = np.r_[0, np.cumsum((dense > 0).sum(1))].astype(np.int64)
    idx = np.nonzero(dense)[1].astype(np.int32)
    val = dense[dense > 0]
    base_rows = np.sort(rng.choice(n_pool, 40, replace=False)).astype(np.int64)
    base = (base_rows, dense[base_rows].sum(0), (dense[base_rows] > 0).sum(0).astype(np.int32))
    outside = np.setdiff1d(np.arange(n_pool), base_rows)
    cases = {
        "near": np.sort(np.r_[np.delete(base_rows, [3, 17]), outside[[5, 9, 40]]]),
        "equal": base_rows,
        "far": np.sort(rng.choice(outside, 40, replace=False)),
    }
    for name, nbrs in cases.items():
        mean, count = np.full(n_items, np.nan), np.empty(n_items, np.int32)
        w = 1.0 / len(nbrs)
        done = _mean_from_base(nbrs.astype(np.int64), w, base, ptr, idx, val, mean, count,
                               np.empty(len(nbrs), np.int64), np.empty(len(base_rows), np.int64))  # fmt: skip
        assert done == (name != "far"), name
        if done:
            want = dense[nbrs].mean(0)
            np.testing.assert_allclose(mean, want, rtol=1e-12, atol=0)
            assert np.array_equal(mean == 0, want == 0)
            np.testing.assert_array_equal(count, (dense[nbrs] > 0).sum(0))


def _scan(own, mean, alpha, top, clear=False):
    n = len(mean)
    negated, keys, items = np.empty(n, np.float32), np.empty(n), np.empty(n, np.int64)
    count = tifu_kernel._fused_scan(own, mean, alpha, clear, top, negated, keys, items, np.empty(2 * SAMPLE))
    return keys[:count], items[:count]


def _top(keys, items, top):
    """The top entries (value desc, item asc) of a listing."""
    order = np.lexsort((items, keys))[:top]
    return sorted(zip(items[order].tolist(), (-keys[order]).tolist()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_catalogue_scan_lists_the_top_entries_above_a_threshold(seed):
    """The scan lists a few more than ``top`` items where many values are positive, always
    with the top entries of the full listing among them; with few, every positive one."""
    rng = np.random.default_rng(seed)
    n = 3000
    own = np.where(rng.random(n) < 0.3, rng.random(n), 0.0)
    mean = np.where(rng.random(n) < 0.6, np.round(rng.random(n), 2), 0.0)  # ties at many values
    v = (0.3 * own + 0.7 * mean).astype(np.float32)
    full = (-v[v > 0].astype(np.float64), np.flatnonzero(v > 0))
    for top in (5, 50, 200, 2000):
        keys, items = _scan(own.copy(), mean.copy(), 0.3, top)
        assert np.all(np.diff(items) > 0) and np.all(keys < 0)
        assert np.array_equal(keys, -v[items].astype(np.float64))
        assert _top(keys, items, top) == _top(*full, top)
        if 2 * top < len(full[1]):
            assert top <= len(items) < len(full[1])  # a threshold cut the listing
        else:
            assert len(items) == len(full[1])
    cleared_own, cleared_mean = own.copy(), mean.copy()
    _scan(cleared_own, cleared_mean, 0.3, 50, clear=True)
    assert not cleared_own.any() and not cleared_mean.any()


def test_the_catalogue_scan_lists_every_positive_item_when_the_sample_misleads():
    """Large values only where the threshold's sample looks, small ones elsewhere, zeros
    between: no sampled threshold below zero reaches ``top`` values, so every positive item is
    listed."""
    n, top = 3000, 40
    stride = n // SAMPLE  # the sampled positions: 0, stride, 2 stride, ...
    own = np.zeros(n)
    own[1 : 100 * stride : stride] = 1e-3  # 100 small values, none sampled
    own[: 20 * stride : stride] = np.linspace(2.0, 1.0, 20)  # 20 < top large values, all sampled
    keys, items = _scan(own, np.zeros(n), 1.0, top)
    assert len(items) == np.count_nonzero(own) == 120 > 2 * top
    assert [i for i, _ in _top(keys, items, 20)] == list(range(0, 20 * stride, stride))
