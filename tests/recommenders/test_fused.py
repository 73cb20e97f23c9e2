"""rank of a neural model and of the fusion wrapped around it: the top k of score()'s matrix, ties
included, whether it ranks a few candidates (DNNTSP's default scorer, alone or fused with TIFU-KNN)
or the dense matrix, on one thread or with the fusion's search in parts beside the forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.split import Instances, make_split
from basketgnn.metrics import top_k
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig
from basketgnn.recommenders import fused as fused_module
from basketgnn.recommenders import shared_scoring
from basketgnn.recommenders.base import rank_items
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.scoring.fusion import ScoreFusion, TifuScorer
from basketgnn.scoring.tifu import TifuParams
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer
from tests.support.planted import planted_data


def recommender(data, config, seed=0):
    torch.manual_seed(seed)
    rec = NeuralRecommender(SPEC, config)
    rec.model = DNNTSP.from_config(data.n_items, config)
    with torch.no_grad():  # untrained, but with spread-out scores and a non-trivial gate
        rec.model.scorer.out.weight.normal_(0, 3.0)
    rec.item_ids = data.item_ids
    return rec


def dense_top_k(rec, data, instances, k):
    scores = rec.score(data, instances)
    idx = top_k(scores, k)
    return idx, np.take_along_axis(scores, idx, axis=1).astype(np.float32)


@pytest.mark.parametrize("weight", [None, 0.3, 1.0])
@pytest.mark.parametrize("user_context, threads", [(False, 1), (False, 2), (True, 2)])
def test_rank_equals_the_top_k_of_score(weight, user_context, threads):
    """threads 2: the search in parts on a helper thread beside the forward."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    config = DNNTSPConfig(embed_dim=8, threads=threads, user_context=user_context)
    base = recommender(data, config)
    rec = base
    if weight is not None:
        rec = FusedRecommender(base, ScoreFusion(weight, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10))))
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    for k in (5, 40):
        items, values = rec.rank(data, everyone, k)
        want_items, want_values = dense_top_k(rec, data, everyone, k)
        np.testing.assert_array_equal(items, want_items)
        np.testing.assert_array_equal(values, want_values)
    # The candidate path was the one taken where it applies.
    assert (base.shared_scores(data, everyone) is None) == user_context


@pytest.mark.parametrize("weight", [0.3, 1.0])
@pytest.mark.parametrize("threads", [1, 2])
def test_rank_with_item_transitions_equals_the_top_k_of_score(weight, threads):
    """The fusion's third term ν · t goes through the candidate path (and the two-thread
    search in parts) exactly as through the dense fusion."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=threads))
    fusion = ScoreFusion(
        weight, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10)),
        transitions=TransitionScorer.build(data, sp["train"]), transition_weight=0.1,
        transition_option=TransitionOption(0.5, False),
    )
    rec = FusedRecommender(base, fusion)
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    items, values = rec.rank(data, everyone, 10)
    want_items, want_values = dense_top_k(rec, data, everyone, 10)
    np.testing.assert_array_equal(items, want_items)
    np.testing.assert_array_equal(values, want_values)
    # One customer (one part of the search), and none.
    for n in (1, 0):
        few = Instances(everyone.users[:n], everyone.n_history[:n])
        got = rec.rank(data, few, 10)
        np.testing.assert_array_equal(got[0], items[:n])
        np.testing.assert_array_equal(got[1], values[:n])
    # The term acted: without it the ranking differs.
    plain = FusedRecommender(base, ScoreFusion(weight, "sigmoid", fusion.scorer))
    assert not np.array_equal(plain.rank(data, everyone, 10)[0], items)


@pytest.mark.parametrize("threads", [2, 3])
def test_search_parts_shared_by_threads_give_the_one_thread_ranking(monkeypatch, threads):
    """Many small parts of the search, taken by the helpers and by the forward's thread once
    its batches are done: the same items and scores as one thread's single search."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    fusion = ScoreFusion(
        0.3, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10)),
        transitions=TransitionScorer.build(data, sp["train"]), transition_weight=0.1,
        transition_option=TransitionOption(0.5, False),
    )
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    one = FusedRecommender(recommender(data, DNNTSPConfig(embed_dim=8, threads=1)), fusion)
    want = one.rank(data, everyone, 10)
    many = FusedRecommender(recommender(data, DNNTSPConfig(embed_dim=8, threads=threads)), fusion)
    searched = []
    prepare = fusion.prepare
    monkeypatch.setattr(fusion, "prepare", lambda d, inst: searched.append(len(inst)) or prepare(d, inst))
    monkeypatch.setattr(shared_scoring, "SEARCH_PART", 7)
    got = many.rank(data, everyone, 10)
    assert sorted(searched) == sorted([len(p) for p in np.array_split(np.arange(120), 18)])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_forward_batches_and_search_parts_shared_by_two_threads(monkeypatch):
    """Small forward batches and search parts, taken by both threads from their queues: the
    same items and scores as one thread, every batch and part run once."""
    import basketgnn.recommenders.neural as neural_module

    monkeypatch.setattr(neural_module, "SCORE_BATCH", 8)
    monkeypatch.setattr(shared_scoring, "SEARCH_PART", 5)
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    fusion = ScoreFusion(0.3, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10)))
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    want = FusedRecommender(recommender(data, DNNTSPConfig(embed_dim=8, threads=1)), fusion).rank(data, everyone, 10)
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=2))
    ran: list[tuple[str, int]] = []
    plan_of = base.shared_plan

    def plan_logged(d, inst):
        plan = plan_of(d, inst)
        forward = plan.forward
        plan.forward = lambda idx: ran.append(("forward", len(idx))) or forward(idx)
        return plan

    monkeypatch.setattr(base, "shared_plan", plan_logged)
    prepare = fusion.prepare
    monkeypatch.setattr(fusion, "prepare", lambda d, inst: ran.append(("search", len(inst))) or prepare(d, inst))
    monkeypatch.setattr(shared_scoring, "RANK_PART_ROWS", 16)
    top_k_shared = fusion.top_k_shared
    monkeypatch.setattr(fusion, "top_k_shared", lambda s, k, a: ran.append(("rank", len(s))) or top_k_shared(s, k, a))
    got = FusedRecommender(base, fusion).rank(data, everyone, 10)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert sum(n for kind, n in ran if kind == "forward") == 120 and len([1 for kind, _ in ran if kind == "forward"]) == 15
    assert sum(n for kind, n in ran if kind == "search") == 120 and len([1 for kind, _ in ran if kind == "search"]) == 24
    assert sorted(n for kind, n in ran if kind == "rank") == [60, 60]  # the top k in two parts


def test_scoring_batches_run_longest_first_and_rank_the_same_in_either_order(monkeypatch):
    """The forward batches are score()'s, taken longest history first (threads then end on
    short ones); shortest first takes the same batches in reverse, and both rank alike."""
    import basketgnn.recommenders.neural as neural_module

    monkeypatch.setattr(neural_module, "SCORE_BATCH", 8)
    data = planted_data(n_users=120, n_items=40)
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=2))
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    lengths = base.spec.batches(data, everyone, base.config, False).lengths
    plan = base.shared_plan(data, everyone)
    longest = [int(lengths[b].max()) for b in plan.batches]
    assert longest == sorted(longest, reverse=True) and longest[0] > longest[-1]
    want = base.rank(data, everyone, 10)
    monkeypatch.setattr(NeuralRecommender, "longest_first", False)
    assert [list(b) for b in base.shared_plan(data, everyone).batches] == [list(b) for b in plan.batches[::-1]]
    got = base.rank(data, everyone, 10)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_failing_forward_stops_the_search_parts(monkeypatch):
    """The forward's error goes up at once: the helpers finish the part they hold and take no
    more (the calling thread does not run the rest of the search either)."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=2))
    fusion = ScoreFusion(0.3, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10)))
    rec = FusedRecommender(base, fusion)
    import threading
    import time

    searched = []
    prepare = fusion.prepare

    def slow_prepare(d, inst):  # each part takes 0.3 s: the forward fails during the first
        searched.append(len(inst))
        threading.Event().wait(0.3)
        return prepare(d, inst)

    monkeypatch.setattr(fusion, "prepare", slow_prepare)
    monkeypatch.setattr(shared_scoring, "SEARCH_PART", 1)

    def fail(*args, **kwargs):
        deadline = time.monotonic() + 10
        while not searched and time.monotonic() < deadline:  # a helper holds a part
            time.sleep(0.001)
        raise RuntimeError("forward failed")

    monkeypatch.setattr(base, "shared_plan", fail)
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    with pytest.raises(RuntimeError, match="forward failed"):
        rec.rank(data, everyone, 10)
    assert 1 <= len(searched) <= 2  # the part the helper held (at most one more on a slow machine)


def test_rank_items_uses_rank_and_a_fusion_without_shared_scores_ranks_densely():
    data = planted_data(n_users=80, n_items=30)
    sp = make_split(data, "temporal")
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=1, user_context=True))
    rec = FusedRecommender(base, ScoreFusion(0.2, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10))))
    assert base.shared_scores(data, sp["test"]) is None
    items, values = rank_items(rec, data, sp["test"], 10, chunk=7)
    want_items, want_values = dense_top_k(rec, data, sp["test"], 10)
    np.testing.assert_array_equal(items, want_items)
    # Chunks of 7 customers against one dense batch: BLAS may sum in another order (CI saw
    # 1-ulp differences in 3 of 800 values), so the scores agree to float32 rounding.
    np.testing.assert_allclose(values, want_values, rtol=1e-6, atol=0)


def test_rank_of_no_instances():
    data = planted_data(n_users=30, n_items=20)
    sp = make_split(data, "temporal")
    rec = recommender(data, DNNTSPConfig(embed_dim=8, threads=1))
    fused = FusedRecommender(rec, ScoreFusion(0.2, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=5))))
    for model in (rec, fused):
        items, values = model.rank(data, Instances(np.zeros(0, np.int64), np.zeros(0, np.int64)), 5)
        assert items.shape == (0, 5) and values.shape == (0, 5)


def test_the_fusion_state_round_trips_through_a_checkpoint_section():
    """choose -> state -> from_section gives a recommender ranking as the chosen one."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=1))
    chosen, choice = fused_module.choose(base, data, sp["train"], sp["validate"], fused_module.FusionOptions())
    assert choice is not None and choice["weight"] == (chosen.fusion.weight if chosen else 0)
    section = {"choice": choice, "state": chosen.state() if chosen else None}
    again = fused_module.from_section(base, section)
    want = (chosen or base).rank(data, sp["test"], 10)
    got = again.rank(data, sp["test"], 10)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert fused_module.from_section(base, None) is base
    off = fused_module.choose(base, data, sp["train"], sp["validate"], fused_module.FusionOptions(fusion="off"))
    assert off == (None, None)
    assert "criterion" not in choice["selection"]  # the default: the mean of the six metrics
    _, at10 = fused_module.choose(base, data, sp["train"], sp["validate"],
                                  fused_module.FusionOptions(fusion_criterion="at10"))
    assert at10["selection"]["criterion"] == "at10"
    assert "fusion_criterion: at10" in at10["description"] and "at10" not in choice["description"]
