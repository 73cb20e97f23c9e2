"""The re-ranking stage's candidate features against a plain per-customer reference, with and
without basket times."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from basketgnn.data.dataset import NO_TIME
from basketgnn.data.split import Instances, make_split
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.rerank_features import FEATURES, ItemStats, candidate_features
from basketgnn.scoring.tifu import TifuParams
from tests.support.planted import planted_data

DAY = 86_400 * 10**9


def timed(data, seed=0):
    """The data with increasing basket times: 1 to 20 days apart (some baskets the same day)."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(0, 20, data.n_baskets) * DAY + rng.integers(0, DAY // 2, data.n_baskets)
    times = np.cumsum(gaps) + 10**18
    return dataclasses.replace(data, basket_times=times.astype(np.int64))


def reference(data, inst, items, scores, parts, train):
    """Every feature of every candidate, customer by customer, item by item."""
    n_items = data.n_items
    visible = [data.user_baskets(int(u))[: int(h) + 1] for u, h in zip(train.users, train.n_history)]
    baskets_with = np.zeros(n_items)
    buyers = np.zeros(n_items)
    repeaters = np.zeros(n_items)
    for hist in visible:
        count = np.zeros(n_items)
        for b in hist:
            count[b] += 1
        baskets_with += count
        buyers += count > 0
        repeaters += count > 1
    out = np.zeros(items.shape + (len(FEATURES),))
    timed_data = (data.basket_times != NO_TIME).all()
    for r, (u, h) in enumerate(zip(inst.users, inst.n_history)):
        hist = data.user_baskets(int(u))[: int(h)]
        t0 = data.user_offsets[u]
        days = [(data.basket_times[t0 + b] - data.basket_times[t0 + int(h) - 1]) / DAY for b in range(int(h))]
        for c, i in enumerate(items[r]):
            f = {"score": scores[r, c], "log_rank": math.log1p(c)}
            for name, part in zip(("tifu", "tifu_neighbours", "tifu_own"), parts):
                row_items = part.items[part.offsets[r] : part.offsets[r + 1]]
                row_vals = part.values[part.offsets[r] : part.offsets[r + 1]]
                hit = np.flatnonzero(row_items == i)
                f[name] = float(row_vals[hit[0]]) if len(hit) else 0.0
                f["has_" + name] = float(len(hit) > 0)
            where = [b for b, basket in enumerate(hist) if i in basket]
            cnt = len(where)
            f["bought"] = float(cnt > 0)
            f["log_count"] = math.log1p(cnt)
            f["share"] = cnt / h
            since = h - where[-1] if cnt else None
            f["log_since"] = math.log1p(since) if cnt else math.log1p(h) + 1
            f["in_last"] = float(cnt > 0 and since == 1)
            f["in_last3"] = float(cnt > 0 and since <= 3)
            gap = (where[-1] - where[0]) / (cnt - 1) if cnt > 1 else 0.0
            f["log_gap"] = math.log1p(gap)
            f["due"] = math.log1p(since) - math.log1p(gap) if cnt > 1 else 0.0
            if timed_data and cnt:
                d_last = -days[where[-1]]
                d_gap = (days[where[-1]] - days[where[0]]) / (cnt - 1) if cnt > 1 else 0.0
                f["log_days"] = math.log1p(d_last)
                f["log_gap_days"] = math.log1p(d_gap)
                f["due_days"] = math.log1p(d_last) - math.log1p(d_gap) if cnt > 1 else 0.0
            else:
                f["log_days"] = f["log_gap_days"] = f["due_days"] = 0.0
            f["item_log_baskets"] = math.log1p(baskets_with[i])
            f["item_repeat_share"] = repeaters[i] / max(buyers[i], 1)
            f["item_log_buyers"] = math.log1p(buyers[i])
            f["log_baskets"] = math.log1p(h)
            f["log_basket_size"] = math.log(max(sum(len(b) for b in hist) / h, 1.0))
            out[r, c] = [f[name] for name in FEATURES]
    return out


@pytest.mark.parametrize("with_times", [False, True])
def test_candidate_features_equal_the_per_customer_reference(with_times):
    data = planted_data(n_users=40, n_items=30, seed=3)
    if with_times:
        data = timed(data)
    sp = make_split(data, "temporal")
    inst = sp["test"]
    rng = np.random.default_rng(1)
    # candidates: each row a random permutation's first 12 (own items and others alike)
    items = np.stack([rng.permutation(data.n_items)[:12] for _ in range(len(inst))])
    scores = rng.normal(size=items.shape).astype(np.float32)
    scorer = TifuScorer.build(data, sp["train"], TifuParams(k=5, m=2, alpha=0.3), top=8)
    found = scorer.scores(data, inst, [0.0, 0.3, 1.0])
    parts = (found[0.3], found[0.0], found[1.0])
    got = candidate_features(data, inst, items, scores, parts, ItemStats.of(data, sp["train"]))
    want = reference(data, inst, items, scores, parts, sp["train"])
    assert got.shape == (len(inst), 12, len(FEATURES)) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # some candidates are bought before, some repeated, some in TIFU's kept top, some not
    column = {name: got[..., j] for j, name in enumerate(FEATURES)}
    assert 0 < column["bought"].mean() < 1 and (column["log_gap"] > 0).any()
    assert 0 < column["has_tifu"].mean() < 1
    assert (column["log_days"] > 0).any() == with_times
    # Each customer's features depend on its own inputs alone: the same rows in two calls.
    half = len(inst) // 2
    for part in (slice(0, half), slice(half, len(inst))):
        sub = Instances(inst.users[part], inst.n_history[part])
        sub_parts = tuple(p.rows(part.start, part.stop) for p in parts)
        alone = candidate_features(data, sub, items[part], scores[part], sub_parts, ItemStats.of(data, sp["train"]))
        np.testing.assert_array_equal(alone, got[part])


def test_item_stats_count_the_training_customers_visible_baskets():
    data = planted_data(n_users=30, n_items=20, seed=2)
    train = Instances(np.array([0, 1]), np.array([2, 3]))
    stats = ItemStats.of(data, train)
    baskets = data.user_baskets(0)[:3] + data.user_baskets(1)[:4]
    count = np.bincount(np.concatenate(baskets), minlength=data.n_items)
    np.testing.assert_allclose(stats.log_baskets, np.log1p(count), rtol=1e-6)
    assert stats.repeat_share.max() <= 1.0 and stats.log_buyers.max() <= math.log1p(2) + 1e-6
