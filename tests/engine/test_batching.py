"""The batch plan: one seeded plan per epoch (under torch.distributed every rank runs a slice of
each batch: tests/engine/test_distributed.py)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.engine.batching import BatchPlan, length_batches, score_work
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSPConfig
from basketgnn.models.options import TrainOptions


def test_one_process_runs_the_whole_seeded_plan():
    lengths = np.random.default_rng(0).integers(1, 9, size=103)
    plan = BatchPlan(batch_size=10).epoch(lengths, seed=4, epoch=2)
    expected = length_batches(lengths, 10, np.random.default_rng([4, 2]))
    assert [b.tolist() for b in plan] == [b.tolist() for b in expected]
    assert sorted(np.concatenate(plan).tolist()) == list(range(103))
    other = BatchPlan(batch_size=10).epoch(lengths, seed=4, epoch=3)
    assert [b.tolist() for b in other] != [b.tolist() for b in plan]


# How ranks share the plan: tests/engine/test_distributed.py.


def _greedy_reference(lengths, sizes, batch_size, work, min_rows=1):
    """Obviously correct: walk the length order row by row and close the batch when the next
    row would make it too big (batch_size rows, or work above the bound with min_rows held)."""
    order = np.lexsort((np.arange(len(lengths)), lengths))
    batches, current = [], []
    for i in order:
        grown = current + [i]
        too_much = sum(sizes[j] for j in grown) * max(lengths[j] for j in grown) > work
        if current and (len(current) == batch_size or (too_much and len(current) >= min_rows)):
            batches.append(current)
            grown = [i]
        current = grown
    return batches + [current]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_work_bounded_batches_match_the_greedy_reference(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, size=157)
    sizes = rng.integers(1, 50, size=157)
    for work, min_rows in ((500, 1), (3000, 1), (3000, 3), (10**9, 1)):
        got = length_batches(lengths, 16, None, sizes, work, min_rows)
        assert [b.tolist() for b in got] == [list(map(int, b)) for b in _greedy_reference(lengths, sizes, 16, work, min_rows)]
        for b in got:  # within the bound, unless one row alone (or min_rows) passes it
            assert len(b) <= 16
            assert sizes[b].sum() * lengths[b].max() <= work or len(b) <= min_rows
    # Small work: long histories get fewer customers per batch.
    small = length_batches(lengths, 16, None, sizes, 3000)
    assert len(small) > len(length_batches(lengths, 16, None))
    long_rows = [len(b) for b in small if lengths[b].max() >= 25]
    short_rows = [len(b) for b in small if lengths[b].max() <= 5]
    assert max(long_rows) < max(short_rows)


def test_a_bound_never_reached_leaves_the_seeded_plan_unchanged():
    rng = np.random.default_rng(3)
    lengths, sizes = rng.integers(1, 9, size=103), rng.integers(1, 9, size=103)
    worst = 10 * int(np.sort(sizes)[-10:].sum()) * int(lengths.max())
    for epoch in (1, 2):
        plain = BatchPlan(batch_size=10).epoch(lengths, seed=4, epoch=epoch)
        bounded = BatchPlan(batch_size=10, work=worst).epoch(lengths, seed=4, epoch=epoch, sizes=sizes)
        assert [b.tolist() for b in bounded] == [b.tolist() for b in plain]
    tight = BatchPlan(batch_size=10, work=40).epoch(lengths, seed=4, epoch=1, sizes=sizes)
    assert len(tight) > len(plain)
    assert sorted(np.concatenate(tight).tolist()) == list(range(103))


def test_ranks_share_work_bounded_batches_with_the_same_steps():
    rng = np.random.default_rng(5)
    lengths, sizes = rng.integers(1, 40, size=90), rng.integers(1, 30, size=90)
    for world in (2, 3):
        ranks = [BatchPlan(10, world, r, work=800).epoch(lengths, 0, 1, sizes) for r in range(world)]
        assert len({len(r) for r in ranks}) == 1
        assert all(len(b) >= 1 for r in ranks for b in r)
        assert sorted(np.concatenate([b for r in ranks for b in r]).tolist()) == list(range(90))


@pytest.mark.parametrize("name", ["DC.json", "TaFeng.json"])
def test_default_work_bound_leaves_the_published_batches_unchanged(dnntsp, name):
    """No batch of 64 DC or TaFeng training (or 256 validation) customers, in any epoch's tie
    order, reaches the default bound: the worst case at each history length L is L times the
    64 (256) largest node counts among customers with histories <= L."""
    data = read_dnntsp_json(dnntsp(name))
    split = make_split(data)
    options = TrainOptions()
    for part, rows, bound in (("train", options.batch_size, options.batch_work),
                              ("validate", 256, score_work(options))):
        inst = split[part]
        T = np.asarray(inst.n_history, dtype=np.int64)
        nodes = build_user_graphs(data, inst, with_targets=False).sizes
        worst = max(L * np.sort(nodes[T <= L])[::-1][:rows].sum() for L in np.unique(T))
        assert worst <= bound, (part, worst)
        assert T.max() <= DNNTSPConfig().max_history  # nor does the default history cap
    # DNNTSP's training item cap leaves every DC window whole (TaFeng: 1% of customers).
    if name == "DC.json":
        from basketgnn.models.dnntsp import SPEC

        assert SPEC.batches(data, split["train"], DNNTSPConfig(), True).left_out_baskets == 0
    # Nor does DNNTSP's min_steps: the earliest stop, after patience + 1 epochs, is past it.
    config = DNNTSPConfig()
    steps = len(length_batches(np.asarray(split["train"].n_history), config.batch_size, None))
    assert (config.patience + 1) * steps >= config.min_steps, steps


@pytest.mark.parametrize("order", ["shuffled", "ordered"])
def test_shuffled_and_ordered_plans_are_dataloader_batches(order):
    lengths = np.random.default_rng(0).integers(1, 20, size=203)
    plan = BatchPlan(batch_size=10, order=order)
    batches = plan.epoch(lengths, seed=4, epoch=2)
    assert [len(b) for b in batches] == [10] * 20 + [3]
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(203))  # every instance once
    assert [b.tolist() for b in plan.epoch(lengths, seed=4, epoch=2)] == [b.tolist() for b in batches]
    bucketed = BatchPlan(batch_size=10).epoch(lengths, seed=4, epoch=2)
    assert [b.tolist() for b in bucketed] != [b.tolist() for b in batches]
    if order == "ordered":  # the data's order, every epoch, whatever the seed
        assert flat.tolist() == list(range(203))
        assert np.array_equal(np.concatenate(plan.epoch(lengths, seed=9, epoch=7)), flat)
    else:  # a permutation drawn from (seed, epoch)
        assert np.array_equal(flat, np.random.default_rng([4, 2]).permutation(203))
        assert not np.array_equal(np.concatenate(plan.epoch(lengths, seed=4, epoch=3)), flat)
        assert not np.array_equal(np.concatenate(plan.epoch(lengths, seed=5, epoch=2)), flat)
        # not sorted by length inside a batch: the lengths of a batch are mixed
        assert any(len(set(lengths[b])) > 3 for b in batches)


@pytest.mark.parametrize("world", [2, 3])
def test_shuffled_plan_is_sliced_alike_on_every_rank(world):
    lengths = np.random.default_rng(1).integers(1, 9, size=95)
    whole = BatchPlan(10, order="shuffled").epoch(lengths, 0, 1)
    ranks = [BatchPlan(10, world, r, order="shuffled").epoch(lengths, 0, 1) for r in range(world)]
    assert len({len(r) for r in ranks}) == 1  # the same number of steps on every rank
    for step in range(len(ranks[0])):
        together = np.concatenate([ranks[r][step] for r in range(world)])
        assert sorted(together.tolist()) == sorted(whole[step].tolist())  # one step = one plan batch
    assert sorted(np.concatenate([np.concatenate(r) for r in ranks]).tolist()) == list(range(95))


def test_work_bound_needs_bucketed_batches():
    with pytest.raises(ValueError, match="work bound needs length-bucketed"):
        BatchPlan(10, work=100, order="shuffled")
    with pytest.raises(ValueError, match="bucketed, shuffled or ordered"):
        BatchPlan(10, order="random")
    with pytest.raises(ValidationError, match="batch_work bounds length-bucketed batches only"):
        TrainOptions(batch_order="shuffled")
    assert TrainOptions().batch_order == "bucketed"
    assert TrainOptions(batch_order="shuffled", batch_work=0).batch_order == "shuffled"
