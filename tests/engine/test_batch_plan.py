"""The batch plan: one seeded plan per epoch; under torch.distributed every rank takes the same
number of its own batches."""

from __future__ import annotations

import numpy as np

from basketgnn.engine.trainer import BatchPlan, length_batches


def test_one_process_runs_the_whole_seeded_plan():
    lengths = np.random.default_rng(0).integers(1, 9, size=103)
    plan = BatchPlan(batch_size=10).epoch(lengths, seed=4, epoch=2)
    expected = length_batches(lengths, 10, np.random.default_rng([4, 2]))
    assert [b.tolist() for b in plan] == [b.tolist() for b in expected]
    assert sorted(np.concatenate(plan).tolist()) == list(range(103))
    other = BatchPlan(batch_size=10).epoch(lengths, seed=4, epoch=3)
    assert [b.tolist() for b in other] != [b.tolist() for b in plan]


def test_ranks_split_the_plan_into_equal_step_counts_without_overlap():
    lengths = np.random.default_rng(1).integers(1, 9, size=115)  # 12 batches of 10 (last 5)
    ranks = [BatchPlan(10, world_size=5, rank=r).epoch(lengths, 0, 1) for r in range(5)]
    assert {len(r) for r in ranks} == {2}  # 12 // 5 steps each; the 2 left over are dropped
    seen = np.concatenate([b for r in ranks for b in r])
    assert len(seen) == len(set(seen.tolist()))
    whole = BatchPlan(10).epoch(lengths, 0, 1)
    assert [b.tolist() for b in ranks[1]] == [whole[1].tolist(), whole[6].tolist()]
