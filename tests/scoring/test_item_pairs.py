"""The item-pair table and columns against a dense reference: every pair counted customer by
customer, each item's top pairs picked by sorting, the pool customer's own items left out."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.split import Instances, make_split
from basketgnn.scoring.item_pairs import PAIR_FEATURES, ItemPairs
from basketgnn.scoring.rerank_features import FEATURES, feature_names
from tests.support.planted import planted_data


def dense_counts(data, pool):
    """C [I, I] (diagonal: d) over the pool's distinct customers' visible item sets, and the sets."""
    sets = {}
    for u, h in zip(pool.users, pool.n_history):
        key = str(data.user_ids[u])
        sets[key] = sets.get(key, set()) | set(np.concatenate(data.user_baskets(int(u))[: int(h) + 1]).tolist())
    c = np.zeros((data.n_items, data.n_items))
    for items in sets.values():
        for i in items:
            for j in items:
                c[i, j] += 1
    return c, sets


def dense_cosines(data, pool, inst, items, top):
    """Per instance and candidate j, every history item i's (i, cos(i, j), C_ij / d_i) from the
    module docstring's formulas (0 for i = j or a pair outside i's top)."""
    c, sets = dense_counts(data, pool)
    degree = np.diag(c).copy()
    kept = np.zeros_like(c, dtype=bool)
    for i in range(data.n_items):  # row i's top pairs: larger count first, then the lower item
        order = sorted((j for j in range(data.n_items) if j != i and c[i, j] > 0), key=lambda j: (-c[i, j], j))
        kept[i, order[:top]] = True
    out = []
    for u, h in zip(inst.users, inst.n_history):
        own = sets.get(str(data.user_ids[u]), set())
        baskets = data.user_baskets(int(u))[: int(h)]
        history = sorted(set(np.concatenate(baskets).tolist())) if baskets else []
        row = []
        for j in items[len(out)]:
            found = []
            for i in history:
                cij = c[i, j] - (i in own and j in own) if i != j and kept[i, j] else 0.0
                di, dj = max(degree[i] - (i in own), 1), max(degree[j] - (j in own), 1)
                found.append((i, cij / np.sqrt(di) / np.sqrt(dj), cij / di))
            row.append(found)
        out.append(row)
    return out


def dense_columns(data, pool, inst, items, top):
    """:data:`PAIR_FEATURES` of each candidate: log(1 + the sum) and the max of the cosines."""
    cosines = dense_cosines(data, pool, inst, items, top)
    return np.array([[(np.log1p(sum(x[1] for x in f)), max((x[1] for x in f), default=0.0)) for f in row] for row in cosines])


def columns(pairs, data, inst, items):
    out = np.full(items.shape + (len(FEATURES) + 2,), np.nan, np.float32)
    pairs.columns(data, inst, data.histories(inst.users, inst.n_history), items, out, len(FEATURES))
    assert np.isnan(out[..., : len(FEATURES)]).all()  # only its two columns are written
    return out[..., len(FEATURES) :]


@pytest.mark.parametrize("top", [2, 5, 1000])
@pytest.mark.parametrize("split", ["temporal", "random"])
def test_pair_columns_equal_the_dense_reference(top, split):
    data = planted_data(n_users=40, n_items=25, seed=4)
    sp = make_split(data, split)
    pairs = ItemPairs.of(data, sp["train"], top)
    rng = np.random.default_rng(0)
    for inst in (sp["train"], sp["test"], Instances(sp["train"].users, sp["train"].n_history - 1)):
        items = np.stack([rng.permutation(data.n_items)[:10] for _ in range(len(inst))])
        got = columns(pairs, data, inst, items)
        np.testing.assert_allclose(got, dense_columns(data, sp["train"], inst, items, top), rtol=1e-5, atol=1e-6)
        assert (got[..., 1] > 0).any() and ((got[..., 1] == 0).any() or top > 2)  # pruned pairs read 0


def test_the_table_keeps_each_items_largest_counts_ties_to_the_lower_item():
    data = planted_data(n_users=40, n_items=25, seed=5)
    train = make_split(data, "random")["train"]
    c, _ = dense_counts(data, train)
    pairs = ItemPairs.of(data, train, 3)
    np.testing.assert_array_equal(pairs.degree, np.diag(c))
    for i in range(data.n_items):
        row = slice(pairs.offsets[i], pairs.offsets[i + 1])
        want = sorted((j for j in range(data.n_items) if j != i and c[i, j] > 0), key=lambda j: (-c[i, j], j))[:3]
        assert pairs.partners[row].tolist() == want
        assert pairs.counts[row].tolist() == [c[i, j] for j in want]


def test_a_pool_customers_own_items_are_left_out():
    """A customer's only co-buyer is itself: with its own items left out, no pair is left."""
    data = planted_data(n_users=40, n_items=25, seed=6)
    train = make_split(data, "random")["train"]
    one = Instances(train.users[:1], train.n_history[:1])
    pairs = ItemPairs.of(data, one, 1000)
    items = np.arange(data.n_items)[None, :]
    assert columns(pairs, data, one, items).max() == 0.0
    stranger = Instances(train.users[1:2], train.n_history[1:2])  # not in the pool: the counts stand
    assert columns(pairs, data, stranger, items).max() > 0.0


def test_the_state_round_trips_and_names_the_columns():
    data = planted_data(n_users=30, n_items=20, seed=7)
    sp = make_split(data, "temporal")
    pairs = ItemPairs.of(data, sp["train"], 4)
    back = ItemPairs.from_state(pairs.state())
    items = np.tile(np.arange(data.n_items), (len(sp["test"]), 1))
    np.testing.assert_array_equal(columns(back, data, sp["test"], items), columns(pairs, data, sp["test"], items))
    assert feature_names(pairs) == FEATURES + PAIR_FEATURES and feature_names(None) == FEATURES
    with pytest.raises(ValueError, match="top must be"):
        ItemPairs.of(data, sp["train"], 0)


def test_the_strongest_pairs_name_the_history_items_with_the_largest_cosines():
    data = planted_data(n_users=40, n_items=25, seed=8)
    sp = make_split(data, "temporal")
    pairs = ItemPairs.of(data, sp["train"], 6)
    rng = np.random.default_rng(1)
    for inst in (sp["train"], sp["test"]):  # pool customers (own items left out) and others
        items = np.stack([rng.permutation(data.n_items)[:8] for _ in range(len(inst))])
        got = pairs.strongest(data, inst, data.histories(inst.users, inst.n_history), items, 3)
        want = dense_cosines(data, sp["train"], inst, items, 6)
        for got_row, want_row in zip(got, want):
            for g, w in zip(got_row, want_row):
                w = sorted((x for x in w if x[1] > 0), key=lambda x: (-x[1], x[0]))[:3]
                assert [x[0] for x in g] == [x[0] for x in w]
                np.testing.assert_allclose([x[1:] for x in g], [x[1:] for x in w], rtol=1e-9)
        assert sum(map(len, (x for row in got for x in row))) > 0
