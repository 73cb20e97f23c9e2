"""Item transitions: the matrix and the customer score against loop references, the fusion's
third term (dense = candidate path, bit for bit), the choice on validation and the state."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances, make_split
from basketgnn.metrics import top_k
from basketgnn.scoring.candidates import SharedScores, fused_top_k, sigmoid
from basketgnn.scoring.fusion import ScoreFusion, TifuScorer
from basketgnn.scoring.fusion_choice import choose_fusion, validation_criterion
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import TifuParams
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer
from tests.support.scoring import random_data


def reference_matrix(data, pool, row_top):
    """S by loops: pairs of consecutive visible baskets, d = 1 + baskets holding the item."""
    n_items = data.n_items
    counts = np.zeros((n_items, n_items))
    d = np.ones(n_items)
    for u, h in zip(pool.users, pool.n_history):
        baskets = [set(b.tolist()) for b in data.user_baskets(int(u))[: int(h) + 1]]
        for b in baskets:
            for i in b:
                d[i] += 1
        for before, after in zip(baskets, baskets[1:]):
            for i in before:
                for j in after:
                    counts[i, j] += 1
    s = counts / np.sqrt(d[:, None] * d[None, :])
    for i in range(n_items):  # keep each row's row_top largest (ties: the lower column)
        order = sorted((j for j in range(n_items) if s[i, j] > 0), key=lambda j: (-s[i, j], j))
        s[i, order[row_top:]] = 0.0
    return s


def reference_scores(data, matrix, instances, option, top):
    out = np.zeros((len(instances), data.n_items))
    for r, (u, h) in enumerate(zip(instances.users, instances.n_history)):
        baskets = data.user_baskets(int(u))[: int(h)]
        x = np.zeros(data.n_items)
        for age, b in enumerate(reversed(baskets)):
            x[np.unique(b)] += option.decay**age
        t = x @ matrix
        if option.explore_only:
            t[x > 0] = 0.0
        order = [i for i in sorted(range(data.n_items), key=lambda i: (-t[i], i))[:top] if t[i] > 0]
        for i in order:
            out[r, i] = t[i] / t.max()
    return out


def setting(seed=0):
    data = random_data(seed)
    n = data.n_baskets_per_user
    pool = Instances(np.arange(30), n[:30] - 1)
    query = Instances(np.arange(30, 40), n[30:40] - 1)
    return data, pool, query


@pytest.mark.parametrize("row_top", [1000, 3])
def test_matrix_matches_the_loop_reference(row_top):
    data, pool, _ = setting()
    got = TransitionScorer.build(data, pool, row_top=row_top).matrix.toarray()
    np.testing.assert_allclose(got, reference_matrix(data, pool, row_top), rtol=1e-6, atol=1e-12)
    assert (np.count_nonzero(got, axis=1) <= row_top).all()


@pytest.mark.parametrize("option", [TransitionOption(0.5, False), TransitionOption(0.9, True), TransitionOption(0.0, False)])
@pytest.mark.parametrize("top", [200, 4])
def test_scores_match_the_loop_reference(option, top):
    data, pool, query = setting(1)
    scorer = TransitionScorer.build(data, pool)
    got = scorer.scores(data, query, option, top)
    dense = np.zeros((len(query), data.n_items))
    SparseScores(got.offsets, got.items, got.values).add_to(dense, 1.0)
    want = reference_scores(data, scorer.matrix.toarray(), query, option, top)
    np.testing.assert_allclose(dense, want, rtol=1e-9, atol=1e-12)
    assert dense.max() <= 1.0 and (np.diff(got.offsets) <= top).all()


def test_a_customer_with_no_transition_gets_an_empty_row_and_new_items_only_drops_own_items():
    # Item 3 is only ever bought last, so nothing follows it.
    seqs = [[[0, 1], [2]], [[1], [2, 0]], [[0], [1]], [[3]] * 2]
    data = from_sequences(seqs, n_items=4)
    pool = Instances(np.arange(3), np.array([1, 1, 1]))
    scorer = TransitionScorer.build(data, pool)
    t = scorer.scores(data, Instances(np.array([3]), np.array([1])), TransitionOption(0.5, False))
    assert len(t) == 1 and len(t.items) == 0
    q = Instances(np.array([0]), np.array([1]))  # history [0, 1]: 0 -> {2, 1}, 1 -> {2, 0}
    both = scorer.scores(data, q, TransitionOption(0.5, False))
    new = scorer.scores(data, q, TransitionOption(0.5, True))
    assert set(both.items.tolist()) == {0, 1, 2} and new.items.tolist() == [2] and new.values[0] == 1.0


def fusion_with_transitions(data, pool, weight, nu, option):
    tifu = TifuScorer.build(data, pool, TifuParams(k=5, m=2, alpha=0.3), top=12)
    return ScoreFusion(weight, "sigmoid", tifu, transitions=TransitionScorer.build(data, pool),
                       transition_weight=nu, transition_option=option)


@pytest.mark.parametrize("weight", [0.05, 0.4, 1.0])
def test_fusion_adds_nu_times_t_and_the_candidate_path_ranks_bit_for_bit(weight):
    data, pool, query = setting(2)
    option = TransitionOption(0.5, False)
    fusion = fusion_with_transitions(data, pool, weight, 0.1, option)
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(len(query), data.n_items)).astype(np.float32)
    got = fusion.apply(logits, data, query, chunk=3)
    # Reference: (1 - λ) sigmoid + λ q + ν t, from each part's own dense scores.
    q = fusion.scorer.scores(data, query)[0.3].add_to(np.zeros(got.shape), 1.0)
    t = fusion.transitions.scores(data, query, option).add_to(np.zeros(got.shape), 1.0)
    want = (1 - weight) * sigmoid(logits) + weight * q + 0.1 * t if weight < 1 else q + 0.1 * t
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # The candidate path (one shared row + own entries) ranks the same items with the same values.
    own = rng.random((len(query), data.n_items)) < 0.1
    base = rng.normal(size=data.n_items).astype(np.float32)
    r, i = np.nonzero(own)
    shared = SharedScores(base, np.r_[0, np.cumsum(own.sum(1))].astype(np.int64), i.astype(np.int64), logits[r, i])
    dense = fusion.apply(shared.dense(), data, query)
    items, values = fusion.top_k_shared(shared, 8, fusion.prepare(data, query))
    np.testing.assert_array_equal(items, top_k(dense, 8))
    np.testing.assert_array_equal(values, np.take_along_axis(dense, items, axis=1))
    assert fused_top_k(shared, 8, None, weight, addend=fusion.prepare(data, query))[0].tolist() == items.tolist()


def test_transition_state_round_trip_pickle_and_old_states():
    data, pool, query = setting(3)
    fusion = fusion_with_transitions(data, pool, 0.3, 0.05, TransitionOption(0.9, True))
    logits = np.random.default_rng(1).normal(size=(len(query), data.n_items)).astype(np.float32)
    want = fusion.apply(logits, data, query)
    for again in (ScoreFusion.from_state(fusion.state()), pickle.loads(pickle.dumps(fusion))):
        assert again.uses_transitions and again.transition_option == TransitionOption(0.9, True)
        np.testing.assert_array_equal(again.apply(logits, data, query), want)
    assert "item transitions: weight 0.05 (decay 0.9, new items only)" in fusion.describe()
    old = fusion.state()
    for key in ("transitions", "transition_weight", "transition_option"):
        old.pop(key)  # a checkpoint without transitions
    plain = ScoreFusion.from_state(old)
    assert not plain.uses_transitions
    np.testing.assert_array_equal(
        plain.apply(logits, data, query), ScoreFusion(0.3, "sigmoid", fusion.scorer).apply(logits, data, query)
    )


def test_choice_finds_a_transition_signal_that_tifu_misses():
    """Every customer buys item a, then a + 10 in the next basket, then b, then b + 10 (b ≠ a);
    the validation target is b + 10 after b: an item new to the customer, which the noise
    model cannot know and TIFU's neighbours only partly; the transitions can."""
    rng = np.random.default_rng(0)
    seqs = []
    for _ in range(150):
        a, b = (int(x) for x in rng.choice(10, size=2, replace=False))
        noise = [[int(x)] for x in rng.integers(20, 30, size=3)]
        seqs.append(noise + [[a], [a + 10], [b], [b + 10], [int(rng.integers(20, 30))]])
    data = from_sequences(seqs, n_items=30)
    sp = make_split(data, "temporal")  # validate: history ends with [b], target [b + 10]
    val = sp["validate"]
    noise = np.random.default_rng(1).normal(size=(len(val), data.n_items)).astype(np.float32)
    params = TifuParams(k=10, m=2, r_b=1.0, r_g=0.7, alpha=0.5)
    without = choose_fusion(noise, data, sp["train"], val, tifu=params)
    assert not without.uses_transitions and all(g.transition == 0 for g in without.grid)
    with_t = choose_fusion(noise, data, sp["train"], val, tifu=params, transitions=True)
    assert with_t.uses_transitions and with_t.weight > 0
    assert any(g.transition > 0 for g in with_t.grid) and {g.transition for g in with_t.grid} >= {0.0, 0.02}
    best_plain = max(g.validation_criterion for g in without.grid)
    got = validation_criterion(top_k(with_t.apply(noise, data, val), 20), data, val)
    assert got > best_plain + 0.05
    # Floor rule: the chosen point is at least TIFU-KNN alone's on every validation metric.
    tifu_alone = next(g for g in with_t.grid if g.weight == 1 and g.alpha == 0.5 and g.transition == 0)
    chosen = max(
        (g for g in with_t.grid if g.weight == with_t.weight and g.transition == with_t.transition_weight),
        key=lambda g: g.validation_criterion,
    )
    assert all(chosen.metrics[m] >= tifu_alone.metrics[m] for m in tifu_alone.metrics)
