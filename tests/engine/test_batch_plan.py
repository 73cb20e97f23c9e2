"""The batch plan: one seeded plan per epoch (under torch.distributed every rank runs a slice of
each batch: tests/engine/test_distributed.py)."""

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


# How ranks share the plan: tests/engine/test_distributed.py.
