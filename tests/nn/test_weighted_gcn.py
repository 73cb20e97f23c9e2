"""The weighted graph convolution (``nn/weighted_gcn.py``) on a small hand-made graph, against
the dense weight matrix: the weighted sum in both forms (DGL edges, factored B^T B; compiled and
tensor path), BatchNorm by multiplicity against nn.BatchNorm1d on the expanded rows, a layer."""

from __future__ import annotations

import dgl
import pytest
import torch
from torch import nn

from basketgnn.graph.cooccurrence import FactoredAdjacency
from basketgnn.nn.weighted_gcn import MultiplicityBatchNorm1d, WeightedGCN, weighted_sum

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# 4 rows, 3 slots; entry q links row pair_row[q] to slot pair_slot[q].
PAIR_ROW = torch.tensor([0, 1, 1, 2, 3, 0])
PAIR_SLOT = torch.tensor([0, 0, 1, 1, 2, 2])
ROW_SELF = torch.tensor([1.0, -1.0, 0.0, 0.5])
ROW_SCALE = torch.tensor([0.5, 0.5, 1.0, 0.25])


def _factored() -> FactoredAdjacency:
    return FactoredAdjacency(PAIR_ROW, PAIR_SLOT, 3, ROW_SCALE, ROW_SELF)


def _dense_factored() -> torch.Tensor:
    B = torch.zeros(3, 4, dtype=torch.float64)
    B[PAIR_SLOT, PAIR_ROW] = 1.0
    return ROW_SCALE.double()[:, None] * (B.T @ B + torch.diag(ROW_SELF.double()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_factored_sum_is_the_dense_product(dtype):
    torch.manual_seed(0)
    x = torch.randn(4, 5, dtype=dtype)
    dense = (_dense_factored() @ x.double()).to(dtype)
    tensor_path = weighted_sum(_factored(), x, compiled=False)
    torch.testing.assert_close(tensor_path, dense)
    assert torch.equal(weighted_sum(_factored(), x), tensor_path)  # compiled: the same bits


def test_edge_sum_sends_each_source_to_its_destination():
    src, dst = torch.tensor([0, 1, 2, 2, 3]), torch.tensor([1, 0, 2, 3, 3])
    w = torch.tensor([0.5, 2.0, 1.0, -1.0, 3.0])
    graph = dgl.graph((src, dst), num_nodes=4)
    graph.edata["w"] = w
    x = torch.randn(4, 2)
    W = torch.zeros(4, 4)
    W[dst, src] = w  # agg[j] = sum_i w(i, j) x_i
    torch.testing.assert_close(weighted_sum(graph, x), W @ x)


def test_batch_norm_by_multiplicity_equals_expanded_rows():
    torch.manual_seed(1)
    x = torch.randn(5, 3, dtype=torch.float64)
    weight = torch.tensor([1, 3, 0, 2, 1])
    ours = MultiplicityBatchNorm1d(3).double().train()
    reference = nn.BatchNorm1d(3).double().train()
    expanded = x.repeat_interleave(weight, dim=0)
    out, ref = ours(x, weight), reference(expanded)
    torch.testing.assert_close(out.repeat_interleave(weight, dim=0), ref)
    torch.testing.assert_close(ours.running_mean, reference.running_mean)
    torch.testing.assert_close(ours.running_var, reference.running_var)
    assert ours.state_dict().keys() == reference.state_dict().keys()
    ours.eval()
    reference.eval()
    torch.testing.assert_close(ours(x, weight), reference(x))


def test_gcn_layers_against_dense_composition():
    torch.manual_seed(2)
    gcn = WeightedGCN(4, num_layers=2).double().eval()
    x = torch.randn(4, 4, dtype=torch.float64)
    W = _dense_factored()
    expected = x
    for layer in gcn.layers:
        expected = torch.relu(layer.norm(layer.linear(W @ expected)))
    with torch.no_grad():
        torch.testing.assert_close(gcn(_factored(), x, torch.ones(4)), expected)
