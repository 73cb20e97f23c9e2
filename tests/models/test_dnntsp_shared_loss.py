"""DNNTSP's training loss from the scores in shared form (``SPEC.sparse_loss``: no [B, I]
matrix) against the soft-margin loss of its dense scores: the same loss and the same gradient
of every parameter, float64, in train mode, for the default configuration and one with every
scorer extension that keeps the shared form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.split import make_split
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.models.spec import SparseForward
from basketgnn.nn.losses import compute_loss, multi_hot
from tests.support.planted import planted_data


def _loss_and_grads(module, batch, config, n_items: int, sparse: bool):
    module.zero_grad()
    torch.manual_seed(1)  # the same dropout masks on both paths
    if sparse:
        out = module(batch, sparse=True)
        assert isinstance(out, SparseForward)
        loss = SPEC.sparse_loss(config)(module, batch, out, config)
    else:
        y = multi_hot(batch.target_items, batch.target_offsets, n_items).double()
        loss = compute_loss(config.loss, module(batch), y)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "options",
    [{}, {"dropout": 0.0, "item_prior": False, "gate": "fixed"}, {"membership_steps": 2, "presence": False}],
    ids=["default", "fixed-gate", "membership"],
)
def test_shared_form_loss_and_gradients_equal_the_dense_ones(options):
    data = planted_data(n_users=80)
    split = make_split(data, "temporal")
    config = DNNTSPConfig(embed_dim=16, **options)
    torch.manual_seed(0)
    module = SPEC.build(data.n_items, config)
    if SPEC.init is not None:
        SPEC.init(module, data, split["train"], config)
    module.double().train()
    batch = SPEC.batches(data, split["train"], config, True).collate(np.arange(32))
    loss_s, grads_s = _loss_and_grads(module, batch, config, data.n_items, sparse=True)
    loss_d, grads_d = _loss_and_grads(module, batch, config, data.n_items, sparse=False)
    assert loss_s == pytest.approx(loss_d, rel=1e-12)
    assert grads_s.keys() == grads_d.keys() and len(grads_d) > 10
    for name, g in grads_d.items():
        torch.testing.assert_close(grads_s[name], g, rtol=1e-9, atol=1e-15, msg=name)


def test_sparse_scores_need_the_shared_form():
    module = SPEC.build(10, DNNTSPConfig(embed_dim=8, user_context=True))
    data = planted_data(n_users=20)
    split = make_split(data, "temporal")
    batch = SPEC.batches(data, split["train"], DNNTSPConfig(embed_dim=8), True).collate(np.arange(4))
    with pytest.raises(ValueError, match="shared form|user_context"):
        module(batch, sparse=True)
