"""DNNTSP on batches whose customers share absent rows (``share_absent``, what scoring passes
build) against the per-node layout: the same scores in eval mode, on the compiled kernels and
on the tensor path, and the same training-mode outputs (BatchNorm's statistics from the summed
multiplicities); the shared form against the dense matrix. Equal up to rounding: the matrix product (MKL) may round a row differently by
its position in the matrix, and the shared rows sit elsewhere than the per-node ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from basketgnn.data.split import make_split
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from tests.support.planted import planted_data


def _pair(options: dict, dtype: torch.dtype):
    data = planted_data(n_users=120)
    split = make_split(data, "temporal")
    config = DNNTSPConfig(embed_dim=16, **options)
    torch.manual_seed(0)
    module = SPEC.build(data.n_items, config).to(dtype)
    if SPEC.init is not None:
        SPEC.init(module, data, split["train"], config)
    scored = SPEC.batches(data, split["test"], config, False)
    assert scored.share_absent  # what scoring builds
    idx = np.random.default_rng(0).permutation(len(scored))[:64]
    shared = scored.collate(idx, with_targets=False)
    plain = dataclasses.replace(scored, share_absent=False).collate(idx, with_targets=False)
    assert shared.num_rows < plain.num_rows - 100
    return module, plain, shared


@pytest.mark.parametrize(
    "options",
    [{}, {"head_merge": "mean", "heads": 2}, {"aggregation": "last"}, {"membership_steps": 2, "catalogue_columns": None}],
    ids=["default", "mean-heads", "last", "membership"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scores_are_the_per_node_layouts(options, dtype):
    module, plain, shared = _pair(options, dtype)
    module.eval()
    tol = {"rtol": 1e-12, "atol": 1e-13} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-6}
    with torch.inference_mode():  # the compiled kernels
        torch.testing.assert_close(module(shared), module(plain), **tol)
        a, b = module(plain, sparse=True), module(shared, sparse=True)
        torch.testing.assert_close(b.base, a.base, **tol)
        torch.testing.assert_close(b.value, a.value, **tol)
        assert len(a.value) == len(plain.node_item) > 0
    with torch.enable_grad():  # weights that need a gradient: the tensor path
        assert all(p.requires_grad for p in module.parameters())
        torch.testing.assert_close(module(shared).detach(), module(plain).detach(), **tol)


@pytest.mark.parametrize(
    "options",
    [{}, {"head_merge": "mean", "heads": 2}, {"aggregation": "last"}, {"attention": False}],
    ids=["default", "mean-heads", "last", "no-attention"],
)
def test_shared_form_is_the_dense_matrix(options):
    """The shared form and the dense forward read each node's w_o . z from the attention on
    values folded to that direction (``forward_nodes_dot``): written into the [B, I] matrix the
    shared form is the dense forward, bit for bit; both equal the scores from the nodes' full
    vectors z (``score_nodes``) and the tensor path's, up to rounding."""
    module, plain, _ = _pair(options, torch.float64)
    module.eval()
    with torch.inference_mode():
        dense = module(plain)  # [B, I]
        sparse = module(plain, sparse=True)
        from_z = module.score_nodes(plain, module.node_vectors(plain))
        if module.attention is not None:
            module.attention.compiled = False
        tensor_path = module(plain)
    rebuilt = sparse.base.expand_as(dense).clone()
    rebuilt[sparse.row, sparse.item] = sparse.value
    assert (sparse.value != sparse.base[sparse.item]).all()  # the nodes' own scores differ
    assert torch.equal(rebuilt, dense)
    torch.testing.assert_close(dense, from_z, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dense, tensor_path, rtol=1e-12, atol=1e-12)


def test_training_mode_statistics_are_unchanged():
    module, plain, shared = _pair({"dropout": 0.0}, torch.float64)
    module.train()
    start = _running_stats(module)
    out_plain = module(plain).detach()
    after_plain = _running_stats(module)
    assert not torch.equal(after_plain, start)  # the statistics moved: the check has teeth
    _set_running_stats(module, start)
    out_shared = module(shared).detach()
    torch.testing.assert_close(out_shared, out_plain, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(_running_stats(module), after_plain, rtol=1e-10, atol=1e-12)


def _batchnorms(module) -> list[torch.nn.BatchNorm1d]:
    return [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm1d)]


def _running_stats(module) -> torch.Tensor:
    """BatchNorm's running means and variances, flattened (a copy)."""
    return torch.cat([torch.cat([m.running_mean, m.running_var]) for m in _batchnorms(module)]).clone()


def _set_running_stats(module, flat: torch.Tensor) -> None:
    at = 0
    for m in _batchnorms(module):
        n = m.running_mean.numel()
        m.running_mean.copy_(flat[at : at + n])
        m.running_var.copy_(flat[at + n : at + 2 * n])
        m.num_batches_tracked.fill_(0)
        at += 2 * n
