"""Scoring in shared form: the dense scores on any number of threads, and validation's metrics
from it equal to the dense matrix's, whether the configuration has the shared form or not."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from basketgnn.data.split import make_split
from basketgnn.engine.batching import SCORE_BATCH, score_source
from basketgnn.engine.threads import THREAD_PREFIX
from basketgnn.engine.trainer import validation_metrics
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig
from basketgnn.recommenders import shared_scoring
from basketgnn.recommenders.shared_scoring import (
    ranked_in_parts,
    run_shared,
    shared_plan,
    shared_ranking,
)
from tests.support.planted import planted_data


def module_and_source(user_context=False, seed=0):
    data = planted_data(n_users=120, n_items=40)
    validate = make_split(data, "temporal")["validate"]
    config = DNNTSPConfig(embed_dim=8, user_context=user_context)
    torch.manual_seed(seed)
    module = DNNTSP.from_config(data.n_items, config)
    with torch.no_grad():  # untrained, but with spread-out scores and a non-trivial gate
        module.scorer.out.weight.normal_(0, 3.0)
    return data, validate, module, SPEC.batches(data, validate, config, False)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_shared_scores_on_any_threads_are_the_dense_scores(threads):
    data, _, module, source = module_and_source()
    dense = score_source(module, source, data.n_items, torch.device("cpu"), 8)
    plan = shared_plan(module, SPEC.score_sparse, source, torch.device("cpu"), 8, 0)
    assert len(plan.batches) == -(-len(source) // 8)
    shared = run_shared(plan, threads)
    np.testing.assert_array_equal(shared.dense(), dense)


def test_a_failing_batch_ends_the_others_then_goes_up():
    data, _, module, source = module_and_source()
    plan = shared_plan(module, SPEC.score_sparse, source, torch.device("cpu"), 8, 0)
    ran = []
    forward = plan.forward

    def flaky(idx):
        ran.append(len(idx))
        if len(ran) == 2:
            raise ValueError("batch 2")
        return forward(idx)

    plan.forward = flaky
    with pytest.raises(ValueError, match="batch 2"):
        run_shared(plan, 2)
    assert len(ran) == len(plan.batches)  # every batch ran (or was taken) before the error went up


@pytest.mark.parametrize("user_context", [False, True])
@pytest.mark.parametrize("threads, parallel_after_s", [(1, 0.0), (2, 0.0), (2, float("inf"))])
def test_validation_metrics_from_the_shared_form_equal_the_dense_ones(user_context, threads, parallel_after_s):
    """user_context: no shared form (score_sparse gives None), so the dense path ranks. The
    first validation ranks the dense scores on the calling thread; the later ones the shared
    form on the helpers when it took parallel_after_s or longer and there are helpers, else the
    engine's dense scores (as they do once a shared pass finds no shared form)."""
    data, validate, module, source = module_and_source(user_context)
    device = torch.device("cpu")
    dense = validation_metrics(module, source, data, validate, device, 0)
    calls: list[list[str]] = [[], [], []]

    def counted(module, batch):
        calls[len(asked)].append(threading.current_thread().name)
        return SPEC.score_sparse(module, batch)

    rank = shared_ranking(counted, threads, data.n_items, parallel_after_s)
    asked: list[int] = []
    for _ in range(3):
        assert validation_metrics(module, source, data, validate, device, 0, rank) == dense
        asked.append(1)
    assert 0 < dense["recall@20"] < 1  # a ranking that is neither empty nor perfect
    first, second, third = calls
    assert first == []  # the first validation never runs the shared form
    helpers = threads > 1 and parallel_after_s == 0.0
    n_batches = -(-len(source) // SCORE_BATCH)
    if helpers:
        assert len(second) == n_batches and all(name.startswith(THREAD_PREFIX) for name in second)
        if user_context:
            assert third == []
        else:
            assert len(third) == n_batches and all(name.startswith(THREAD_PREFIX) for name in third)
    else:  # no gain from the helpers: the engine's dense ranking
        assert second == third == []


@pytest.mark.parametrize("n, threads, parts", [(1000, 2, 2), (1000, 3, 3), (1000, 1, 1), (300, 2, 1), (40, 4, 1), (0, 2, 1)])
def test_rows_ranked_in_parts_on_helper_threads_stack_in_row_order(monkeypatch, n, threads, parts):
    monkeypatch.setattr(shared_scoring, "RANK_PART_ROWS", 256)
    calls = []

    def rank_rows(a, b):
        calls.append((a, b, threading.current_thread().name.startswith(THREAD_PREFIX)))
        rows = np.arange(a, b)
        return np.stack([rows, -rows], 1), np.stack([rows * 0.5, rows * 0.25], 1)

    items, values = ranked_in_parts(rank_rows, n, threads)
    want = rank_rows(0, n)
    np.testing.assert_array_equal(items, want[0])
    np.testing.assert_array_equal(values, want[1])
    calls.pop()  # the reference
    assert len(calls) == parts and sorted(c[:2] for c in calls)[0][0] == 0 and sum(b - a for a, b, _ in calls) == n
    assert [on_helper for a, _, on_helper in calls if a == 0] == [False]  # the first part on this thread
    assert all(on_helper for a, _, on_helper in calls if a > 0)


def test_a_failing_part_goes_up_after_the_others_end():
    ended = []

    def rank_rows(a, b):
        if a == 0:
            raise RuntimeError("part failed")
        threading.Event().wait(0.2)
        ended.append(a)
        return np.zeros((b - a, 1), np.int64), np.zeros((b - a, 1))

    with pytest.raises(RuntimeError, match="part failed"):
        ranked_in_parts(rank_rows, 2048, 2)
    assert ended == [1024]  # the helper's part ended before the error went up
