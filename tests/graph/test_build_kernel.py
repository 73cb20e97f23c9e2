"""The compiled factored graphs (``graph.build_kernel``, behind ``build_user_graphs``) against
the NumPy form's sorts, array for array: random customers, history caps, targets, customers
without history, items listed twice in a basket, and a retail export's shapes (baskets of
hundreds of items, histories of hundreds of baskets)."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import NO_TIME, BasketData, _offsets
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import UserGraphs, build_user_graphs


def _raw_data(sequences: list[list[list[int]]], n_items: int) -> BasketData:
    """BasketData exactly as listed: repeats inside a basket kept (from_sequences drops them)."""
    baskets = [b for user in sequences for b in user]
    return BasketData(
        items=np.asarray([i for b in baskets for i in b], dtype=np.int32),
        basket_offsets=_offsets(np.asarray([len(b) for b in baskets], dtype=np.int64)),
        user_offsets=_offsets(np.asarray([len(u) for u in sequences], dtype=np.int64)),
        basket_times=np.full(len(baskets), NO_TIME, dtype=np.int64),
        user_ids=np.asarray([str(u) for u in range(len(sequences))]),
        item_ids=np.asarray([str(i) for i in range(n_items)]),
        user_part=np.full(len(sequences), -1, dtype=np.int8),
    )


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
    data = _raw_data(users, 25)
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
    data = _raw_data(users, 8)
    instances = Instances(np.arange(len(users)), np.array([len(u) for u in users], dtype=np.int64))
    assert any(len(set(b)) < len(b) for u in users for b in u)
    _assert_same(*_both(data, instances, with_targets=False))


def test_a_retail_exports_shapes():
    """Baskets of up to 300 items and histories of up to 150 baskets."""
    rng = np.random.default_rng(4)
    users = _random_users(rng, 3, 2000, 150, 300) + _random_users(rng, 5, 2000, 3, 2)
    data = _raw_data(users, 2000)
    instances = Instances(np.arange(len(users)), np.array([len(u) for u in users], dtype=np.int64))
    _assert_same(*_both(data, instances, with_targets=False))
    _assert_same(*_both(data, instances, with_targets=False, max_history=20, max_history_items=150))
