"""The compiled scoring kernels against the batch NumPy / SciPy formulation they replaced, bit
for bit (the same float operations in the same order), and the selection helper against a sort.

The batch formulations are written out here (transitions) or are the library's own batch code,
which TIFU-KNN's dense scores and the neighbour add-on still use (``query_chunks``,
``NeighbourIndex.mean``, ``combine``, ``SparseScores.top_scaled``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from basketgnn.data.dataset import _offsets, from_sequences
from basketgnn.data.split import Instances
from basketgnn.scoring import select_kernel
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.tifu import (
    SparseScores,
    TifuParams,
    combine,
    customer_codes,
    customer_vectors,
    query_chunks,
)
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer, _basket_matrix


def with_repeats(data):
    """The same baskets with each basket's first item written twice more, at its end (raw
    exports repeat lines; ``from_sequences`` would merge them)."""
    lengths = np.diff(data.basket_offsets)
    first = data.items[data.basket_offsets[:-1]]
    parts = np.split(data.items, data.basket_offsets[1:-1])
    items = np.concatenate([np.r_[p, f, f] for p, f in zip(parts, first)]).astype(data.items.dtype)
    return replace(data, items=items, basket_offsets=_offsets(lengths + 2))


def skewed_data(seed, n_users, n_items, max_basket, repeats=False):
    """Baskets drawn from a skewed catalogue (a few items are in most baskets: long pool and
    transition rows) with many equal values; ``repeats``: items repeated inside baskets."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_items + 1)
    p /= p.sum()
    sequences = []
    for _ in range(n_users):
        baskets = []
        for _ in range(rng.integers(1, 9)):
            size = int(rng.integers(1, max_basket + 1))
            basket = rng.choice(n_items, size=size, replace=repeats, p=p) if size <= n_items else np.arange(n_items)
            baskets.append([int(i) for i in basket])
        sequences.append(baskets)
    data = from_sequences(sequences, n_items=n_items)
    return with_repeats(data) if repeats else data


def instances(data, users, back=0):
    users = np.asarray(users)
    n = np.maximum(data.n_baskets_per_user[users] - back, 0)
    return Instances(users, n)


def batch_tifu(scorer, data, query, alphas):
    """TifuScorer.scores as it was computed before the kernel: dense blocks of queries."""
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


def assert_same(got: SparseScores, want: SparseScores):
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.items, want.items)
    np.testing.assert_array_equal(got.values, want.values)  # bit for bit


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


def batch_transitions(scorer, data, query, option, top):
    """TransitionScorer.scores as it was computed before the kernel: SciPy products."""
    hist = data.histories(query.users, query.n_history)
    x = _basket_matrix(hist, data.n_items)
    n_baskets = np.diff(hist.basket_offsets)
    owner = np.repeat(np.arange(len(query.users)), n_baskets)
    age = hist.basket_offsets[owner + 1] - 1 - np.arange(len(owner))
    weights = sp.csr_matrix((np.power(float(option.decay), age), (owner, np.arange(len(owner)))),
                            shape=(len(query.users), len(owner)))  # fmt: skip
    h = (weights @ x).tocsr()
    t = (h @ scorer.matrix).toarray()
    if option.explore_only:
        own = h.tocoo()
        t[own.row, own.col] = 0.0
    return SparseScores.top_scaled(t, min(top, data.n_items), np.float64)


@pytest.mark.parametrize("option", [TransitionOption(0.5, False), TransitionOption(0.9, True),
                                    TransitionOption(0.0, True), TransitionOption(1.0, False)])  # fmt: skip
@pytest.mark.parametrize("n_items, max_basket, top", [(40, 12, 200), (3000, 4, 200), (40, 12, 5)])
def test_transition_kernel_equals_the_scipy_products_bit_for_bit(option, n_items, max_basket, top):
    """Baskets with repeated items; a small catalogue lists t's items by a scan, a large one as
    they come; top 5 cuts through equal values."""
    data = skewed_data(n_items, 90, n_items, max_basket, repeats=True)
    scorer = TransitionScorer.build(data, instances(data, np.arange(60), back=1))
    query = Instances(np.arange(50, 90), np.r_[data.n_baskets_per_user[50:60] - 1, data.n_baskets_per_user[60:90]])
    assert_same(scorer.scores(data, query, option, top), batch_transitions(scorer, data, query, option, top))


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


@pytest.mark.parametrize("weight", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("width, n_items", [(None, 300), (3, 300), (None, 60)])
def test_grid_top_k_equals_the_dense_fusion(weight, width, n_items):
    """The fusion choice's ranking of one grid point (``fusion_choice._ranked_fused``) against
    ``top_k`` of the dense fused rows: logits that saturate the sigmoid (equal normalised
    values), quantised addends (equal fused values), and a prefix too short for some rows
    (``width`` 3: those rows take the dense path; 60 items: the prefix is the whole catalogue,
    so a walk that never sees a smaller value ends settled)."""
    from basketgnn.metrics import top_k
    from basketgnn.scoring.fusion import fuse_normalised, normalise
    from basketgnn.scoring.fusion_choice import _ranked_fused

    rng = np.random.default_rng(int(weight * 100) + (width or 0) + n_items)
    n, k = 40, 10
    model = np.round(rng.normal(size=(n, n_items)) * 4) * 10  # many ties, sigmoid 1.0 or 0.0
    model[:5] = rng.normal(size=(5, n_items))  # and rows with distinct values
    counts = rng.integers(0, 15, size=n)
    items = np.concatenate([np.sort(rng.choice(n_items, c, replace=False)) for c in counts]).astype(np.int64)
    addend = SparseScores(_offsets(counts), items, np.ceil(rng.uniform(0, 1, len(items)) * 4) / 4 * weight)
    normalised = normalise(model, "sigmoid")
    prefix = top_k(normalised, width or min(n_items, k + 2 * 15 + 64))
    want = top_k(fuse_normalised(model, None if weight == 1 else normalised, addend, weight), k)
    np.testing.assert_array_equal(_ranked_fused(model, normalised, prefix, addend, weight, k), want)


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
    """``customer_vectors`` (compiled sums) against the NumPy formulation it replaced: weights of
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
