"""Score fusion with TIFU-KNN: a loop reference, the grid's two ends, the minmax transform, no
leakage on a temporal split, and the state round trip."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances, make_split
from basketgnn.metrics import top_k
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.scoring.fusion import FusionPoint, ScoreFusion, TifuScorer
from basketgnn.scoring.tifu import TifuParams
from tests.support.scoring import random_data, reference_scores


def reference_fusion(logits, tifu, weight, top):
    """(1 - w) sigmoid(logit) + w * TIFU / max(TIFU), TIFU cut to its `top` entries, by loops."""
    out = np.zeros(logits.shape)
    for r in range(len(logits)):
        kept = np.zeros(logits.shape[1])
        order = [i for i in np.argsort(-tifu[r], kind="stable")[:top] if tifu[r, i] > 0]
        for i in order:
            kept[i] = tifu[r, i] / tifu[r].max()
        for i in range(logits.shape[1]):
            out[r, i] = (1 - weight) / (1 + np.exp(-float(logits[r, i]))) + weight * kept[i]
    return out


def setting(seed=0):
    data = random_data(seed)
    n = data.n_baskets_per_user
    train = Instances(np.arange(30), n[:30] - 1)
    # Users 0..4 are training customers too and must not be their own neighbours.
    query = Instances(np.r_[np.arange(30, 40), np.arange(5)], np.r_[n[30:40] - 1, n[:5] - 2])
    return data, train, query


@pytest.mark.parametrize("weight, top", [(0.3, 30), (0.7, 4)])
def test_fusion_matches_the_loop_reference(weight, top):
    data, train, query = setting()
    params = TifuParams(k=5, m=2, r_b=0.9, r_g=0.7, alpha=0.4)
    tifu, gap = reference_scores(data, train, query, 5, 2, 0.9, 0.7, 0.4)
    assert gap > 1e-9, "near-tied neighbours would make the comparison ambiguous"
    logits = np.random.default_rng(1).normal(size=(len(query), data.n_items)).astype(np.float32)
    fusion = ScoreFusion(weight, "sigmoid", TifuScorer.build(data, train, params, top))
    got = fusion.apply(logits, data, query, chunk=4)  # several chunks
    np.testing.assert_allclose(got, reference_fusion(logits, tifu, weight, top), rtol=1e-5, atol=1e-6)
    # prepare() beside the model gives the same as apply() searching itself.
    np.testing.assert_array_equal(fusion.apply(logits, data, query, fusion.prepare(data, query)), got)


def test_weight_zero_is_the_model_and_weight_one_is_tifu_knn():
    data, train, query = setting(1)
    tifu = TifuKnn(k=5, m=3, r_b=1.0, r_g=0.6, alpha=0.5, tune=False).fit(data, train)
    scorer = TifuScorer.build(data, train, tifu.tifu_params, top=30)
    logits = np.random.default_rng(2).normal(size=(len(query), data.n_items)).astype(np.float32)
    alone = ScoreFusion(0.0, "sigmoid", scorer).apply(logits, data, query)
    assert alone is logits  # untouched, so the model's ranking tie for tie
    ranked = top_k(ScoreFusion(1.0, "sigmoid", scorer).apply(logits, data, query), 20)
    np.testing.assert_array_equal(ranked, top_k(tifu.score(data, query), 20))


def test_minmax_keeps_each_rows_order_on_zero_one():
    from basketgnn.scoring.fusion import normalise

    x = np.array([[3.0, -1.0, 1.0], [2.0, 2.0, 2.0]])
    np.testing.assert_allclose(normalise(x, "minmax"), [[1.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="unknown transform"):
        normalise(x, "rank")


def test_no_target_basket_and_no_own_row_reaches_a_customers_scores():
    # Temporal split: train target = basket 1, validate target = basket 2, test target = basket 3.
    # Customer 0 alone buys item 9 (basket 0, in its own pool row), item 7 (its validation
    # target) and item 8 (its test target).
    seqs = [[[0, 9], [1, 2], [7, 1], [8]]] + [[[0, 1], [1, 2], [1, 3], [2]] for _ in range(5)]
    data = from_sequences(seqs, n_items=10)
    sp = make_split(data, "temporal")
    scorer = TifuScorer.build(data, sp["train"], TifuParams(k=5, m=1, r_b=1.0, r_g=1.0, alpha=0.0), 10)
    fusion = ScoreFusion(1.0, "sigmoid", scorer)
    for part in ("validate", "test"):
        got = fusion.apply(np.zeros((6, 10), np.float32), data, sp[part])
        assert not got[:, [7, 8]].any(), part  # targets are in no pool row
        assert got[0, 9] == 0, part  # customer 0 is not its own neighbour ...
        assert (got[1:, 9] > 0).all(), part  # ... but the others' neighbour


def test_state_round_trip_and_pickle():
    data, train, query = setting(2)
    logits = np.random.default_rng(3).normal(size=(len(query), data.n_items)).astype(np.float32)
    scorer = TifuScorer.build(data, train, TifuParams(k=5, m=2, alpha=0.3), top=12)
    fusion = ScoreFusion(0.4, "sigmoid", scorer, [FusionPoint(0.4, 0.3, 0.5)], 0.25)
    for again in (ScoreFusion.from_state(fusion.state()), pickle.loads(pickle.dumps(fusion))):
        assert again.weight == 0.4 and again.grid == fusion.grid and again.alpha == 0.3
        np.testing.assert_array_equal(again.apply(logits, data, query), fusion.apply(logits, data, query))
    off = ScoreFusion.from_state(ScoreFusion(0.0, "sigmoid", None).state())
    assert off.scorer is None and off.apply(logits, data, query) is logits
    with pytest.raises(ValueError, match="not a fusion state"):
        ScoreFusion.from_state({"kind": "other"})
