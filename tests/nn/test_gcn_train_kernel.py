"""The GCN's factored sum for training (``nn.gcn_kernel.weighted_sum_trainable``, used by
``weighted_gcn.weighted_sum`` on the CPU when a gradient is needed): values and gradients in
float64 against the dense weight matrix and the tensor path, torch's gradcheck, and a whole
GCN's gradients on a real batch against the tensor path."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn import gcn_kernel
from basketgnn.nn.weighted_gcn import WeightedGCN, weighted_sum
from tests.nn.test_attention_kernel import DIM, _batch, _users
from tests.nn.test_weighted_gcn import (
    PAIR_ROW,
    PAIR_SLOT,
    ROW_SCALE,
    ROW_SELF,
    _dense_factored,
    _factored,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("width", [5, 32])  # 32: the default width, compiled with constant loops
def test_values_and_gradients_equal_dense_and_tensor_path(width):
    torch.manual_seed(0)
    x = torch.randn(4, width, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, width, dtype=torch.float64)
    out = weighted_sum(_factored(), x)
    assert out.grad_fn is not None and "WeightedSum" in type(out.grad_fn).__name__
    ref = weighted_sum(_factored(), x, compiled=False)
    torch.testing.assert_close(out, _dense_factored() @ x)
    assert torch.equal(out, ref)  # the same additions in the same order
    (gx,) = torch.autograd.grad((out * g).sum(), [x])
    (g_ref,) = torch.autograd.grad((ref * g).sum(), [x])
    torch.testing.assert_close(gx, _dense_factored().T @ g)
    torch.testing.assert_close(gx, g_ref, rtol=1e-12, atol=1e-14)


def test_gradcheck():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda v: gcn_kernel.weighted_sum_trainable(v, PAIR_ROW, PAIR_SLOT, 3, ROW_SELF.double(), ROW_SCALE.double()),
        (x,),
    )


@pytest.mark.parametrize("seed", [0, 2])
def test_gcn_gradients_on_a_batch_equal_the_tensor_path(seed):
    batch = _batch(_users(seed, long=True), seed)
    torch.manual_seed(seed)
    gcn = WeightedGCN(DIM, 2).double().train()
    x = torch.randn(batch.num_rows, DIM, dtype=torch.float64, requires_grad=True)
    g = torch.randn(batch.num_rows, DIM, dtype=torch.float64)
    grads = []
    for compiled in (True, False):
        for layer in gcn.layers:
            layer.compiled = compiled
        out = gcn(batch.adjacency, x, batch.row_weight)
        grads.append((out, *torch.autograd.grad((out * g).sum(), [x, *gcn.parameters()])))
    for a, b in zip(*grads):
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
