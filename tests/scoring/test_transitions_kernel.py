"""The compiled item-transition score against SciPy's products, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from basketgnn.data.split import Instances
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer, _basket_matrix
from tests.support.scoring import assert_same, instances, skewed_data


def batch_transitions(scorer, data, query, option, top):
    """TransitionScorer.scores by SciPy products."""
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
