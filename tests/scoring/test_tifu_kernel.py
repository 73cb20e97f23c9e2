"""TIFU-KNN's compiled kernels against the batch NumPy / SciPy formulation, bit for bit (the
same float operations in the same order): the kept scores of the fusion's scorer, the
tuning ranks and the decayed customer vectors. The batch formulation is the library's own
(``query_chunks``, ``NeighbourIndex.mean``, ``combine``, ``SparseScores.top_scaled``), which
TIFU-KNN's dense scores and the neighbour add-on use."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.split import Instances
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import (
    TifuParams,
    combine,
    customer_codes,
    customer_vectors,
    query_chunks,
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
    ],
)
def test_tifu_kernel_equals_the_batch_search_bit_for_bit(n_items, max_basket, k, top):
    data = skewed_data(n_items + k, 80, n_items, max_basket)
    train = instances(data, np.arange(60), back=1)
    # Queries: new customers, and training customers (never their own neighbours).
    query = Instances(np.r_[np.arange(60, 80), np.arange(0, 60, 7)],
                      np.r_[data.n_baskets_per_user[60:80], data.n_baskets_per_user[0:60:7] - 1])  # fmt: skip
    scorer = TifuScorer.build(data, train, TifuParams(k=k, m=2, r_b=0.9, r_g=0.7, alpha=0.3), top)
    alphas = (0.3, 0.0, 1.0, 0.8)
    got, want = scorer.scores(data, query, alphas), batch_tifu(scorer, data, query, alphas)
    for a in alphas:
        assert_same(got[a], want[a])
    assert max(len(np.unique(want[0.3].values)), 1) < len(want[0.3].values)  # equal values occur


def test_tifu_kernel_with_empty_histories():
    data = skewed_data(5, 40, 50, 5)
    train = instances(data, np.arange(30), back=1)
    query = Instances(np.arange(25, 40), np.r_[np.zeros(5, np.int64), data.n_baskets_per_user[30:40]])
    scorer = TifuScorer.build(data, train, TifuParams(k=4, m=3, alpha=0.5), 12)
    got, want = scorer.scores(data, query), batch_tifu(scorer, data, query, (0.5,))
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
