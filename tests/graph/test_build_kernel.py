"""The compiled factored graphs (``graph.build_kernel``, behind ``build_user_graphs``) against
the NumPy form's sorts, array for array: random customers, history caps, targets, customers
without history, items listed twice in a basket, and a retail export's shapes (baskets of
hundreds of items, histories of hundreds of baskets)."""

from __future__ import annotations

import numpy as np
import pytest
from raw_data import raw_basket_data

from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import UserGraphs, build_user_graphs


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
    _assert_same(*_both(data, instances, with_targets=False))
    _assert_same(*_both(data, instances, with_targets=False, max_history=20, max_history_items=150))


def test_no_instances():
    data = raw_basket_data([[[1, 2], [2]]], 4)
    none = Instances(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    compiled, reference = _both(data, none, with_targets=False)
    assert len(compiled) == 0
    _assert_same(compiled, reference)
