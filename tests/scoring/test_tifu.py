"""The shared TIFU machinery (scoring/tifu.py); TIFU-KNN's vectors, search and tuning are
checked against loops in tests/recommenders/test_tifu_knn.py, the fusion in test_fusion.py."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.split import Instances
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.tifu import TifuParams, capped_pool, keep_top
from tests.support.scoring import random_data, reference_scores


def test_keep_top_ties_go_to_the_lower_column():
    x = np.array([[0.5, 0.2, 0.5, 0.5, 0.1], [0.0, 0.3, 0.0, 0.0, 0.0], [1, 2, 3, 4, 5.0]])
    got = keep_top(x, 2)
    assert got.sum(axis=1).tolist() == [2, 2, 2]
    assert got[0].tolist() == [True, False, True, False, False]  # three 0.5s: the first two
    assert got[1].tolist() == [True, True, False, False, False]  # 0.3, then the first 0.0
    assert got[2].tolist() == [False, False, False, True, True]
    assert keep_top(x, 5).all() and keep_top(x, 9).all()


# --- the capped neighbour pool -------------------------------------------------------------------

def _setting(n_users: int = 40):
    data = random_data(5, n_users=n_users)
    n = data.n_baskets_per_user
    train = Instances(np.arange(30), n[:30] - 1)
    query = Instances(np.r_[np.arange(30, 40), np.arange(4)], np.r_[n[30:40] - 1, n[:4] - 2])
    return data, train, query


def test_capped_pool_is_a_seeded_uniform_sample_in_order():
    train = Instances(np.arange(100, 200), np.arange(100) % 7 + 1)
    a, b = capped_pool(train, 30, seed=1), capped_pool(train, 30, seed=1)
    np.testing.assert_array_equal(a.users, b.users)
    assert len(a) == 30 and len(np.unique(a.users)) == 30
    assert np.all(np.diff(a.users) > 0)  # original order kept
    np.testing.assert_array_equal(a.n_history, (a.users - 100) % 7 + 1)  # pairs stay together
    assert not np.array_equal(capped_pool(train, 30, seed=2).users, a.users)
    # Every training customer is about equally likely: 2,000 draws of 30 of 100.
    counts = np.bincount(
        np.concatenate([capped_pool(train, 30, seed=s).users - 100 for s in range(2000)]), minlength=100
    )
    assert counts.min() > 480 and counts.max() < 720  # expected 600 each
    assert capped_pool(train, 100) is train and capped_pool(train, None) is train


@pytest.mark.parametrize("cap", [30, 31, 10_000])
def test_a_cap_at_or_above_the_pool_gives_the_exact_search(cap):
    data, train, query = _setting()
    exact = TifuKnn(k=5, m=2, alpha=0.3, tune=False, pool_cap=None).fit(data, train)
    capped = TifuKnn(k=5, m=2, alpha=0.3, tune=False, pool_cap=cap).fit(data, train)
    np.testing.assert_array_equal(capped.score(data, query), exact.score(data, query))


def test_a_smaller_cap_searches_only_the_sampled_customers():
    data, train, query = _setting()
    model = TifuKnn(k=4, m=2, r_b=0.9, r_g=0.7, alpha=0.3, tune=False, pool_cap=12, pool_seed=3)
    got = model.fit(data, train).score(data, query)
    pool = capped_pool(train, 12, 3)
    assert len(pool) == 12
    expected, _ = reference_scores(data, pool, query, 4, 2, 0.9, 0.7, 0.3)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert model.params()["pool_cap"] == 12
    with pytest.raises(ValueError, match="pool_cap must be >= 1"):
        TifuKnn(pool_cap=0)
    with pytest.raises(ValueError, match="pool_cap must be >= 1"):
        TifuParams(pool_cap=0)


def test_the_fusion_scorer_keeps_its_capped_pool_through_its_state():
    data, train, query = _setting()
    params = TifuParams(k=4, m=2, alpha=0.3, pool_cap=12, pool_seed=3)
    scorer = TifuScorer.build(data, train, params, top=10)
    assert scorer.vectors.n_rows == 12
    np.testing.assert_array_equal(
        np.sort(scorer.customer_ids), np.sort(data.user_ids[capped_pool(train, 12, 3).users].astype(str))
    )
    again = TifuScorer.from_state(scorer.state())
    assert again.params == params
    a, b = scorer.scores(data, query)[0.3], again.scores(data, query)[0.3]
    np.testing.assert_array_equal(a.items, b.items)
    np.testing.assert_array_equal(a.values, b.values)
