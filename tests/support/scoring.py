"""Data generators and loop references shared by the scoring tests (``tests.support.scoring``).

``random_data``, ``reference_vector`` and ``reference_scores`` are TIFU-KNN's slow loop
reference (TIFU-KNN's tests use it too); the others build skewed catalogues and
compare sparse rows bit for bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from basketgnn.data.dataset import BasketData, _offsets, from_sequences
from basketgnn.data.split import Instances
from basketgnn.scoring.sparse import SparseScores


def reference_vector(
    baskets: list[np.ndarray], n_items: int, m: int, r_b: float, r_g: float
) -> np.ndarray:
    v = np.zeros(n_items)
    newest_first = baskets[::-1]
    groups = [newest_first[s : s + m] for s in range(0, len(baskets), m)]
    for g, group in enumerate(groups):
        y = np.zeros(n_items)
        for p, basket in enumerate(group):
            y[basket] += r_b**p
        v += r_g**g * y / len(group)
    return v / max(len(groups), 1)


def reference_scores(
    data: BasketData,
    train: Instances,
    query: Instances,
    k: int,
    m: int,
    r_b: float,
    r_g: float,
    alpha: float,
) -> tuple[np.ndarray, float]:
    """Scores, and the smallest gap between the k-th and (k+1)-th neighbour distance."""

    def vec(u: int, h: int) -> np.ndarray:
        return reference_vector(data.user_baskets(u)[:h], data.n_items, m, r_b, r_g)

    train_vecs = [vec(u, h + 1) for u, h in zip(train.users, train.n_history)]
    out, min_gap = [], np.inf
    for u, h in zip(query.users, query.n_history):
        own = vec(u, h)
        cands = sorted(
            (float(np.sum((own - t) ** 2)), j)
            for j, t in enumerate(train_vecs)
            if train.users[j] != u
        )
        if len(cands) > k:
            min_gap = min(min_gap, cands[k][0] - cands[k - 1][0])
        nbrs = [train_vecs[j] for _, j in cands[:k]]
        out.append(alpha * own + (1 - alpha) * np.mean(nbrs, axis=0))
    return np.array(out), min_gap


def random_data(seed: int, n_users: int = 40, n_items: int = 30) -> BasketData:
    rng = np.random.default_rng(seed)
    return from_sequences(
        [
            [
                list(rng.choice(n_items, size=rng.integers(1, 6), replace=False))
                for _ in range(rng.integers(3, 9))
            ]
            for _ in range(n_users)
        ],
        n_items=n_items,
    )


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


def assert_same(got: SparseScores, want: SparseScores):
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.items, want.items)
    np.testing.assert_array_equal(got.values, want.values)  # bit for bit
