"""The compiled factored graphs (``graph.build_kernel``, behind ``build_user_graphs``) against
the NumPy form's sorts, array for array: random customers, history caps, targets, customers
without history, items listed twice in a basket, and a retail export's shapes (baskets of
hundreds of items, histories of hundreds of baskets, hundreds of items bought twice)."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.split import Instances
from basketgnn.graph import build_kernel
from basketgnn.graph.cooccurrence import UserGraphs, build_user_graphs
from tests.support.raw_data import raw_basket_data


def _random_users(rng, n_users, n_items, max_baskets, max_size, repeats=False):
    users = []
    for _ in range(n_users):
        T = int(rng.integers(1, max_baskets + 1))
        favourites = rng.choice(n_items, size=min(n_items, 3 * max_size), replace=False)
        users.append([
            (rng.choice(favourites, size=int(rng.integers(1, max_size + 1)), replace=repeats)).tolist()
            for _ in range(T)
        ])  # fmt: skip
    return users


def _assert_same(a: UserGraphs, b: UserGraphs) -> None:
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert x == y, name


def _both(data, instances, **kwargs):
    return [build_user_graphs(data, instances, compiled=c, **kwargs) for c in (True, False)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("caps", [{}, {"max_history": 4}, {"max_history": 6, "max_history_items": 9}])
def test_compiled_factored_graphs_equal_the_sorts(seed, caps):
    rng = np.random.default_rng(seed)
    users = _random_users(rng, 60, 25, 12, 5)
    data = raw_basket_data(users, 25)
    # Every customer's full history minus the last basket (a target), some with none at all.
    n_history = np.array([len(u) - 1 for u in users], dtype=np.int64)
    instances = Instances(np.arange(len(users)), n_history)
    assert (n_history == 0).any()
    compiled, reference = _both(data, instances, with_targets=True, **caps)
    assert compiled.pair_row is not None and len(compiled.pair_row) > 0
    assert (compiled.self_w < 1).any()  # some pair of items repeats (max c > 1)
    _assert_same(compiled, reference)


def test_items_listed_twice_in_a_basket():
    rng = np.random.default_rng(3)
    users = _random_users(rng, 40, 8, 6, 6, repeats=True)
    data = raw_basket_data(users, 8)
    instances = Instances(np.arange(len(users)), np.array([len(u) for u in users], dtype=np.int64))
    assert any(len(set(b)) < len(b) for u in users for b in u)
    _assert_same(*_both(data, instances, with_targets=False))


def test_a_retail_exports_shapes():
    """Baskets of up to 300 items and histories of up to 150 baskets (slots ranked by a sort
    past 64 baskets, through the dense table below)."""
    rng = np.random.default_rng(4)
    users = _random_users(rng, 3, 2000, 150, 300) + _random_users(rng, 5, 2000, 3, 2)
    data = raw_basket_data(users, 2000)
    instances = Instances(np.arange(len(users)), np.array([len(u) for u in users], dtype=np.int64))
    assert instances.n_history.max() > 64  # past the dense (t, s) table: slots ranked by a sort
    # max c from pair keys sorted (more items bought twice than the pair table holds) and from
    # the table (the others)
    repeated = [sum(n >= 2 for n in np.unique(np.concatenate(u), return_counts=True)[1]) for u in users]
    assert max(repeated) > build_kernel._TABLE_NODES >= min(r for r in repeated if r > 0)
    _assert_same(*_both(data, instances, with_targets=False))
    _assert_same(*_both(data, instances, with_targets=False, max_history=20, max_history_items=150))


def test_no_instances():
    data = raw_basket_data([[[1, 2], [2]]], 4)
    none = Instances(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    compiled, reference = _both(data, none, with_targets=False)
    assert len(compiled) == 0
    _assert_same(compiled, reference)


# --- the kernel's helpers against direct computations -----------------------------------------


def _entries(seed, n=5):
    """Instances of baskets of distinct items: entry_offsets, item, entry_t (basket by basket)
    and each instance's baskets as sets."""
    rng = np.random.default_rng(seed)
    offsets, item, entry_t, histories = [0], [], [], []
    for _ in range(n):
        baskets = [set(rng.choice(7, size=int(rng.integers(1, 5)), replace=False).tolist())
                   for _ in range(int(rng.integers(0, 6)))]  # fmt: skip
        for t, b in enumerate(baskets):
            order = rng.permutation(sorted(b))  # a basket's entries in any order
            item += order.tolist()
            entry_t += [t] * len(b)
        offsets.append(len(item))
        histories.append(baskets)
    return (np.array(offsets, np.int64), np.array(item, np.int64), np.array(entry_t, np.int64), histories)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nodes_are_distinct_items_with_their_entries(seed):
    offsets, item, _, _ = _entries(seed)
    node_key, entry_node, node_present, node_offsets, node_first, order = build_kernel._nodes(offsets, item, 7)
    inst = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    keys, inverse, counts = np.unique(inst * 7 + item, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(node_key, keys)
    np.testing.assert_array_equal(entry_node, inverse)
    np.testing.assert_array_equal(node_present, counts)
    np.testing.assert_array_equal(node_offsets, np.searchsorted(keys // 7, np.arange(len(offsets))))
    # each node's entries, in entry order, at order[node_first[v]:node_first[v + 1]]
    for v in range(len(keys)):
        np.testing.assert_array_equal(order[node_first[v] : node_first[v + 1]], np.flatnonzero(inverse == v))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_c_is_the_most_baskets_shared_by_two_items(seed):
    offsets, item, entry_t, histories = _entries(seed)
    _, entry_node, node_present, node_offsets, _, _ = build_kernel._nodes(offsets, item, 7)
    max_c = build_kernel._max_c(offsets, entry_t, entry_node, node_present, node_offsets)
    for u, baskets in enumerate(histories):
        shared = [sum(a in b and c in b for b in baskets) for a in range(7) for c in range(a + 1, 7)]
        assert max_c[u] == max([1, *shared]), u


def test_slot_ranks_by_table_and_by_sort():
    keys = np.array([9, 4, 4, 16, 0, 9, 4], np.int64)
    expected = np.unique(keys, return_inverse=True)[1]
    by_sort = np.concatenate([[-5], keys, [-5]])  # only the slice start .. stop is ranked
    assert build_kernel._rank_by_sort(by_sort, 1, 8) == 4
    np.testing.assert_array_equal(by_sort[1:8], expected)
    slot_id, listed = np.full(25, -1, np.int64), np.empty(25, np.int64)
    for k in np.unique(keys):  # marked and listed, as _pairs does while writing the keys
        slot_id[k] = 0
    listed[:4] = [9, 4, 16, 0]
    by_table = keys.copy()
    build_kernel._rank_by_table(by_table, 0, len(keys), slot_id, listed, 4)
    np.testing.assert_array_equal(by_table, expected)
    assert (slot_id == -1).all()  # the table is left clean for the next instance
