"""DNNTSP's scores in shared form read at a few items per customer (``score_sparse`` with
``wanted``): the entries it keeps (:func:`wanted_entries`, compiled and in tensor operations,
against a set lookup), the plan of the kept nodes (:class:`NodeSubset`, compiled and in tensor
operations, against the batch's own plan), and the kept nodes' scores against the whole batch's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from basketgnn.graph.attention_plan import NodeSubset
from basketgnn.models.dnntsp import SPEC
from basketgnn.models.spec import searched_entries, wanted_entries
from tests.models.test_dnntsp_shared_absent import _pair


def _batch(options: dict, dtype: torch.dtype):
    """A module in eval mode and a batch laid out as scoring lays it out (shared absent rows)."""
    module, _, shared = _pair(options, dtype)
    module.eval()
    return module, shared, module.num_items


def _wanted(n_rows: int, n_items: int, c: int, seed: int = 1) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.stack([rng.permutation(n_items)[:c] for _ in range(n_rows)]))


@pytest.mark.parametrize("c", [0, 1, 7, 40])
def test_wanted_entries_are_the_entries_whose_item_the_row_wants(c):
    rng = np.random.default_rng(c)
    row = torch.from_numpy(rng.integers(0, 9, 300))  # rows in no order, items repeated
    item = torch.from_numpy(rng.integers(0, 40, 300))
    wanted = _wanted(9, 40, c)
    want = [m for m in range(300) if int(item[m]) in set(wanted[int(row[m])].tolist())]
    assert wanted_entries(row, item, wanted, 40).tolist() == want
    assert searched_entries(row, item, wanted, 40).tolist() == want
    assert (0 < len(want) < 300) == (0 < c < 40)


@pytest.mark.parametrize("keep_every", [1, 2, 5, 10_000])
def test_node_subset_is_the_batchs_plan_of_those_nodes(keep_every):
    _, batch, _ = _batch({}, torch.float32)
    nodes = torch.arange(0, len(batch.node_item), keep_every)
    plan = NodeSubset.of(batch, nodes)
    reference = NodeSubset.of_tensors(batch, nodes)
    for f in dataclasses.fields(NodeSubset):
        a, b = getattr(plan, f.name), getattr(reference, f.name)
        assert (a == b) if f.name == "max_len" else (torch.equal(a, b) and a.dtype == b.dtype), f.name
    offsets = np.concatenate([[0], np.cumsum(batch.node_count.numpy())])
    sub_offsets = np.concatenate([[0], np.cumsum(plan.node_count.numpy())])
    for k, m in enumerate(nodes.tolist()):  # each kept node's plan is the batch's
        assert plan.absent_row[k] == batch.absent_row[m] and plan.node_len[k] == batch.node_len[m]
        for ours, theirs in ((plan.node_rows, batch.node_rows), (plan.node_times, batch.node_times)):
            assert torch.equal(ours[sub_offsets[k] : sub_offsets[k + 1]], theirs[offsets[m] : offsets[m + 1]])
    assert len(plan.node_rows) == sum(int(batch.node_count[m]) for m in nodes.tolist())


@pytest.mark.parametrize(
    "options",
    [{}, {"head_merge": "mean", "heads": 2}, {"aggregation": "last"}, {"membership_steps": 2}, {"attention": False}],
    ids=["default", "mean-heads", "last", "membership", "no-attention"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("off_cpu_forms", [False, True])
def test_scores_read_at_wanted_items_are_the_whole_batchs(options, dtype, off_cpu_forms, monkeypatch):
    """Each kept node reads its own rows, projected in the whole batch's one call: the whole
    batch's bits, for any set of wanted items (several draws and sizes, none included), with the
    compiled helpers or their tensor forms (what runs off the CPU)."""
    import basketgnn.models.dnntsp as dnntsp

    if off_cpu_forms:
        monkeypatch.setattr(NodeSubset, "of", NodeSubset.of_tensors)
        monkeypatch.setattr(dnntsp, "wanted_entries", searched_entries)
    module, batch, n_items = _batch(options, dtype)
    with torch.inference_mode():  # the compiled kernels
        whole = SPEC.score_sparse(module, batch)
    for seed, c in [(1, 12), (7, 12), (8, 12), (6, 1), (11, 3), (2, 0)]:
        wanted = _wanted(batch.batch_size, n_items, c, seed)
        with torch.inference_mode():
            kept = SPEC.score_sparse(module, batch, wanted)
        nodes = wanted_entries(batch.node_user, batch.node_item, wanted, n_items)
        assert (0 < len(nodes) < len(batch.node_item)) == (c > 0)
        assert torch.equal(kept.base, whole.base)
        assert torch.equal(kept.row, whole.row[nodes]) and torch.equal(kept.item, whole.item[nodes])
        assert torch.equal(kept.value, whole.value[nodes]), (seed, c)
    if module.attention is not None:  # the tensor path over the kept nodes' buckets
        module.attention.compiled = False
        wanted = _wanted(batch.batch_size, n_items, 12)
        nodes = wanted_entries(batch.node_user, batch.node_item, wanted, n_items)
        with torch.inference_mode():
            tensor_path = SPEC.score_sparse(module, batch, wanted)
        tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(tensor_path.value, whole.value[nodes], **tol)
