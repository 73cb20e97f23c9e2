"""The weighted graph convolution (``nn/weighted_gcn.py``) on a small hand-made graph, against
the dense weight matrix: the weighted sum in both forms (DGL edges, factored B^T B; compiled and
tensor path), BatchNorm by multiplicity against nn.BatchNorm1d on the expanded rows, a layer."""

from __future__ import annotations

import dgl
import pytest
import torch
from torch import nn

from basketgnn.graph.cooccurrence import FactoredAdjacency
from basketgnn.nn import batch_norm_kernel, gcn_kernel
from basketgnn.nn.weighted_gcn import (
    MultiplicityBatchNorm1d,
    WeightedGCN,
    WeightedGraphConv,
    state_key,
    weighted_sum,
)

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
@pytest.mark.parametrize("width", [5, 32])  # 32: the default width, compiled with constant loops
def test_factored_sum_is_the_dense_product(dtype, width):
    torch.manual_seed(0)
    x = torch.randn(4, width, dtype=dtype)
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


def _batch_norm_and_grads(bn, x, weight, g):
    """bn's output on x, its running statistics after the step and the gradients of
    sum(out * g) with respect to x, gamma and beta."""
    x = x.clone().requires_grad_(True)
    out = bn(x, weight) if weight is not None else bn(x)
    params = [x] + ([bn.weight, bn.bias] if bn.affine else [])
    grads = torch.autograd.grad((out * g).sum(), params)
    return out.detach(), bn.running_mean.clone(), bn.running_var.clone(), grads


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_compiled_batch_norm_equals_the_tensor_path_and_expanded_rows(affine, momentum):
    """The compiled training step (statistics, output, gradients of x, gamma and beta, running
    statistics) against the tensor path and against nn.BatchNorm1d on the expanded rows, float64:
    a row read by its w copies downstream gets their summed gradient w g, and its input's
    gradient is the sum of the copies' gradients."""
    torch.manual_seed(3)
    R, C = 40, 6
    x = torch.randn(R, C, dtype=torch.float64) * 3 + 1
    weight = torch.randint(0, 5, (R,))
    weight[0] = 0
    g_copy = torch.randn(R, C, dtype=torch.float64)  # each copy's gradient
    g = g_copy * weight.unsqueeze(1)  # the row's: its copies' sum
    make = lambda: MultiplicityBatchNorm1d(C, affine=affine, momentum=momentum).double().train()  # noqa: E731
    compiled, tensor = make(), make()
    if affine:
        with torch.no_grad():
            for bn in (compiled, tensor):
                bn.weight.copy_(torch.linspace(0.5, 2, C))
                bn.bias.copy_(torch.linspace(-1, 1, C))
    tensor.compiled = False
    got = _batch_norm_and_grads(compiled, x, weight, g)
    want = _batch_norm_and_grads(tensor, x, weight, g)
    assert got[3][0].abs().max() > 0
    for a, b in zip(got[:3] + tuple(got[3]), want[:3] + tuple(want[3])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    reference = nn.BatchNorm1d(C, affine=affine, momentum=momentum).double().train()
    if affine:
        reference.load_state_dict(compiled.state_dict() | {"running_mean": torch.zeros(C), "running_var": torch.ones(C),
                                                            "num_batches_tracked": torch.tensor(0)})  # fmt: skip
    ref = _batch_norm_and_grads(reference, x.repeat_interleave(weight, dim=0), None, g_copy.repeat_interleave(weight, dim=0))
    kept = weight > 0
    torch.testing.assert_close(got[0][kept].repeat_interleave(weight[kept], dim=0), ref[0])
    torch.testing.assert_close(got[1], ref[1])
    torch.testing.assert_close(got[2], ref[2])
    summed = torch.zeros(R, C, dtype=torch.float64).index_add(0, torch.arange(R).repeat_interleave(weight), ref[3][0])
    torch.testing.assert_close(got[3][0], summed)
    for a, b in zip(got[3][1:], ref[3][1:]):
        torch.testing.assert_close(a, b)


def test_compiled_batch_norm_float32_is_the_tensor_path_up_to_rounding():
    torch.manual_seed(4)
    x = torch.randn(500, 32) * 2
    weight = torch.randint(1, 6, (500,))
    g = torch.randn(500, 32)
    compiled, tensor = MultiplicityBatchNorm1d(32).train(), MultiplicityBatchNorm1d(32).train()
    with torch.no_grad():
        for bn in (compiled, tensor):
            bn.weight.copy_(torch.linspace(0.5, 2, 32))
            bn.bias.copy_(torch.linspace(-1, 1, 32))
    tensor.compiled = False
    got = _batch_norm_and_grads(compiled, x, weight, g)
    want = _batch_norm_and_grads(tensor, x, weight, g)
    assert got[0].dtype == torch.float32 and all(t.dtype == torch.float32 for t in got[3])
    for a, b in zip(got[:3] + tuple(got[3]), want[:3] + tuple(want[3])):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


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


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_training_layers_compiled_equal_the_tensor_path(padded, dropout):
    """A two-layer GCN in training, float64: the compiled BatchNorm + ReLU + dropout draws the
    same mask from the same seed as nn.Dropout, so the outputs, the gradients of the input and
    of every parameter, and the running statistics equal the tensor path's. ``padded``: with the
    padded rows of the authors' BatchNorm statistics; dropout 0: BatchNorm and ReLU alone (the
    paper preset)."""
    torch.manual_seed(5)
    R, C = 30, 8
    graph = FactoredAdjacency(torch.randint(0, R, (50,)), torch.randint(0, 12, (50,)), 12,
                              torch.rand(R) + 0.5, torch.randint(0, 3, (R,)).float())  # fmt: skip
    x = torch.randn(R, C, dtype=torch.float64, requires_grad=True)
    weight = torch.randint(1, 4, (R,))
    pad = (torch.randn(7, C, dtype=torch.float64), torch.randint(1, 5, (7,))) if padded else (None, None)
    compiled = WeightedGCN(C, num_layers=2, dropout=dropout).double().train()
    tensor = WeightedGCN(C, num_layers=2, dropout=dropout).double().train()
    tensor.load_state_dict(compiled.state_dict())
    results = []
    for gcn, on in ((compiled, True), (tensor, False)):
        MultiplicityBatchNorm1d.compiled = on
        try:
            torch.manual_seed(6)
            out = gcn(graph, x, weight, *pad)
            g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
            grads = torch.autograd.grad((out * g).sum(), [x, *gcn.parameters()])
        finally:
            MultiplicityBatchNorm1d.compiled = True
        results.append((out, grads, [b.clone() for b in gcn.buffers()]))
    (out, grads, bufs), (ref, ref_grads, ref_bufs) = results
    assert (out == 0).float().mean() > (0.3 if dropout else 0.1)  # ReLU (and dropout) act
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    for a, b in zip(bufs, ref_bufs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    torch.manual_seed(8)  # another draw drops other entries
    assert torch.allclose(compiled(graph, x, weight, *pad), out) == (dropout == 0)


def test_compiled_pass_only_where_batch_norm_trains_and_dropout_is_below_one():
    """A layer in training whose BatchNorm is frozen (eval) normalises with the running
    statistics, as the tensor path does; dropout 1 drops everything, as nn.Dropout does; the
    kernel itself refuses p = 1."""
    torch.manual_seed(9)
    layer = WeightedGraphConv(4, 4, dropout=0.0).double().train()
    layer.norm.eval()
    x = torch.randn(4, 4, dtype=torch.float64)
    out = layer(_factored(), x, torch.ones(4))
    with torch.no_grad():
        want = torch.relu(layer.norm(layer.linear(_dense_factored() @ x)))
    torch.testing.assert_close(out, want)
    assert int(layer.norm.num_batches_tracked) == 0
    dropped = WeightedGraphConv(4, 4, dropout=1.0).double().train()
    assert (dropped(_factored(), x, torch.ones(4)) == 0).all()
    with pytest.raises(ValueError, match="dropout"):
        batch_norm_kernel.weighted_batch_norm(x, torch.ones(4, dtype=torch.float64), None, None, 1e-5, True, 1.0)


def _eval_gcn(C: int, dtype: torch.dtype, seed: int) -> WeightedGCN:
    """A two-layer GCN in eval mode with BatchNorm statistics and affine parameters away from
    their initial values, so that folding them into the linear map is tested."""
    torch.manual_seed(seed)
    gcn = WeightedGCN(C, num_layers=2, dropout=0.3).to(dtype).eval()
    with torch.no_grad():
        for layer in gcn.layers:
            layer.norm.running_mean.normal_()
            layer.norm.running_var.uniform_(0.2, 3.0)
            layer.norm.weight.normal_()
            layer.norm.bias.normal_()
    return gcn


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [5, 32])  # 32: the default width, compiled with constant loops
def test_gathered_inference_folds_batch_norm_and_projects_the_table(monkeypatch, dtype, width):
    """Eval mode: BatchNorm folded into the linear maps, the first layer's applied to the table,
    sum + bias + ReLU compiled, equal to the dense composition over the gathered rows (and to the
    module's tensor path) up to float rounding; the compiled pass did run, once a layer."""
    R, K = 40, 9
    graph = FactoredAdjacency(torch.randint(0, R, (70,)), torch.randint(0, 15, (70,)), 15,
                              torch.rand(R) + 0.5, torch.randint(0, 3, (R,)).float())  # fmt: skip
    gcn = _eval_gcn(width, dtype, 11)
    table = torch.randn(K, width, dtype=dtype)
    index = torch.randint(0, K, (R,))  # rows share table entries, as items' rows do
    B = torch.zeros(15, R, dtype=torch.float64)
    B.index_put_((graph.pair_slot, graph.pair_row), torch.ones(70, dtype=torch.float64), accumulate=True)
    W = graph.row_scale.double()[:, None] * (B.T @ B + torch.diag(graph.row_self.double()))
    dense = table.double()[index]
    for layer in gcn.layers:
        n = layer.norm
        z = (W @ dense) @ layer.linear.weight.double().T + layer.linear.bias.double()
        z = (z - n.running_mean.double()) / torch.sqrt(n.running_var.double() + n.eps)
        dense = torch.relu(z * n.weight.double() + n.bias.double())
    calls = []
    real = gcn_kernel.projected_sum
    monkeypatch.setattr(gcn_kernel, "projected_sum", lambda *a: calls.append(a[1]) or real(*a))
    with torch.no_grad():
        fused = gcn.forward_gathered(graph, table, index)
        tensor_path = gcn(graph, table[index])
    assert len(calls) == 2 and calls[0] is index and calls[1] is None  # the table gathered in layer 1
    assert (fused == 0).float().mean() > 0.1 and (fused > 0).float().mean() > 0.1  # ReLU acts, not everywhere
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    torch.testing.assert_close(fused.double(), dense, **tol)
    torch.testing.assert_close(fused, tensor_path, **tol)


def test_gathered_forward_falls_back_to_the_rows_in_training_and_where_grads_are_needed(monkeypatch):
    """Training (batch statistics, dropout), a parameter that needs a gradient, a module with
    compiled off, or folding switched off: forward_gathered is forward over table[index], bit
    for bit."""
    R, K, C = 30, 7, 6
    graph = FactoredAdjacency(torch.randint(0, R, (50,)), torch.randint(0, 12, (50,)), 12,
                              torch.rand(R) + 0.5, torch.randint(0, 3, (R,)).float())  # fmt: skip
    gcn = _eval_gcn(C, torch.float64, 12)
    table, index = torch.randn(K, C, dtype=torch.float64), torch.randint(0, K, (R,))
    out = gcn.forward_gathered(graph, table, index)  # eval, grad enabled: parameters need grads
    assert out.requires_grad and torch.equal(out, gcn(graph, table[index]))
    with torch.no_grad():
        monkeypatch.setattr(WeightedGCN, "folded_inference", False)
        assert torch.equal(gcn.forward_gathered(graph, table, index), gcn(graph, table[index]))
        monkeypatch.setattr(WeightedGCN, "folded_inference", True)
        assert not torch.equal(gcn.forward_gathered(graph, table, index), gcn(graph, table[index]))  # folded
        gcn.layers[0].compiled = False
        assert torch.equal(gcn.forward_gathered(graph, table, index), gcn(graph, table[index]))
    gcn.train()
    torch.manual_seed(3)
    got = gcn.forward_gathered(graph, table, index)
    torch.manual_seed(3)
    assert torch.equal(got, gcn(graph, table[index]))


def test_gathered_relu_keeps_nan_as_torch_does():
    graph = FactoredAdjacency(torch.tensor([0, 1]), torch.tensor([0, 0]), 1, torch.ones(2), torch.zeros(2))
    y = torch.tensor([[float("nan"), -1.0], [1.0, 2.0]])
    out = gcn_kernel.projected_sum(y, None, graph.pair_row, graph.pair_slot, 1, graph.row_self, graph.row_scale,
                                   torch.zeros(2))  # fmt: skip
    assert torch.isnan(out[:, 0]).all() and torch.equal(out[:, 1], torch.tensor([1.0, 1.0]))


def test_gathered_inference_keeps_its_projection_until_a_parameter_or_the_key_changes(monkeypatch):
    """With a table key, the folded maps and the projected table are computed once and reused
    while nothing changes; an in-place change of a parameter or buffer, or a new key, recomputes
    them, and every output equals the one computed without the cache."""
    R, K, C = 30, 7, 6
    graph = FactoredAdjacency(torch.randint(0, R, (50,)), torch.randint(0, 12, (50,)), 12,
                              torch.rand(R) + 0.5, torch.randint(0, 3, (R,)).float())  # fmt: skip
    gcn = _eval_gcn(C, torch.float64, 13)
    table, index = torch.randn(K, C, dtype=torch.float64), torch.randint(0, K, (R,))
    folds = []
    real = WeightedGraphConv.folded
    monkeypatch.setattr(WeightedGraphConv, "folded", lambda self: folds.append(1) or real(self))

    def run(key):
        with torch.inference_mode():
            return gcn.forward_gathered(graph, table, index, key)

    first = run(("a",))
    assert torch.equal(run(("a",)), first) and len(folds) == 2  # two layers, folded once
    with torch.no_grad():
        gcn.layers[1].norm.running_var.mul_(2.0)  # in place: a new version
    changed = run(("a",))
    assert len(folds) == 4 and not torch.equal(changed, first)
    assert torch.equal(changed, run(None))  # the uncached result
    table = table * 3  # a new table comes with a new key
    assert torch.equal(run(("b",)), run(None)) and len(folds) == 10  # keyless runs fold every time


def test_state_key_follows_in_place_changes():
    p = nn.Parameter(torch.ones(3))
    key = state_key(p, None)
    assert state_key(p, None) == key
    with torch.no_grad():
        p.add_(1.0)
    assert state_key(p, None) != key
