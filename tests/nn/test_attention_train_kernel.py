"""The compiled attention + readout for training (``nn.attention_train_kernel``, used by
``MaskedTemporalSelfAttention.forward_nodes`` on the CPU when a gradient or dropout is needed):
values and gradients in float64 against the tensor path (``forward_aggregated``) and the dense
attention over the expanded sequences, dropout's mask against the tensor path's draw, and
torch's gradcheck of the autograd function."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.nn import attention_train_kernel
from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention
from tests.nn.test_attention_kernel import DIM, _batch, _dense, _users

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _grads(out: torch.Tensor, params: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    g_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return list(torch.autograd.grad((out * g_out).sum(), params))


def _paths(att, batch, rows, w_agg, seed):
    """forward_nodes (compiled) and forward_aggregated (tensor path) from the same torch seed,
    with the gradients of a random projection of each with respect to rows, qkv and w_agg."""
    params = [rows, att.qkv.weight] + ([w_agg] if w_agg is not None else [])
    torch.manual_seed(seed)
    out = att.forward_nodes(rows, batch, w_agg)
    torch.manual_seed(seed)
    ref = att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg)
    return out, ref, _grads(out, params, seed), _grads(ref, params, seed)


# 4 heads of 8 (concat 32, mean 8): DNNTSP's default head shape, which the kernels compile with
# constant sizes.
@pytest.mark.parametrize(
    "merge,heads,dim", [("concat", 1, DIM), ("concat", 4, DIM), ("mean", 2, DIM), ("concat", 4, 32), ("mean", 4, 8)]
)
@pytest.mark.parametrize("readout", ["learned", "last"])
@pytest.mark.parametrize("seed,long", [(0, False), (1, False), (2, True)])
def test_values_and_gradients_equal_the_tensor_path_and_dense(merge, heads, dim, readout, seed, long):
    batch = _batch(_users(seed, long), seed)
    torch.manual_seed(seed)
    att = MaskedTemporalSelfAttention(dim, heads, merge).double().train()
    rows = torch.randn(batch.num_rows, dim, dtype=torch.float64, requires_grad=True)
    w_agg = torch.randn(dim, dtype=torch.float64, requires_grad=True) if readout == "learned" else None
    out, ref, g_out, g_ref = _paths(att, batch, rows, w_agg, seed)
    assert out.grad_fn is not None and "AttentionReadout" in type(out.grad_fn).__name__
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, _dense(att, rows, batch, w_agg), rtol=1e-10, atol=1e-12)
    g_dense = _grads(_dense(att, rows, batch, w_agg), [rows, att.qkv.weight] + ([w_agg] if w_agg is not None else []), seed)
    for a, b, c in zip(g_out, g_ref, g_dense):
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(a, c, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize(
    "merge,heads,dim,readout",
    [("concat", 4, DIM, "learned"), ("mean", 2, DIM, "learned"), ("concat", 2, DIM, "last"), ("concat", 4, 32, "learned")],
)
@pytest.mark.parametrize("seed,long", [(0, False), (2, True)])
def test_dropout_drops_the_tensor_paths_weights(merge, heads, dim, readout, seed, long):
    """Same torch seed: the same weights dropped, so the same values and gradients."""
    batch = _batch(_users(seed, long), seed)
    torch.manual_seed(seed)
    att = MaskedTemporalSelfAttention(dim, heads, merge, dropout=0.3).double().train()
    rows = torch.randn(batch.num_rows, dim, dtype=torch.float64, requires_grad=True)
    w_agg = torch.randn(dim, dtype=torch.float64, requires_grad=True) if readout == "learned" else None
    out, ref, g_out, g_ref = _paths(att, batch, rows, w_agg, seed)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    torch.manual_seed(seed + 1)  # another draw: other weights dropped
    assert not torch.allclose(att.forward_nodes(rows, batch, w_agg), out)
    att.eval()  # no dropout: neither path drops anything
    with torch.no_grad():
        plain = att.forward_nodes(rows, batch, w_agg)
    torch.testing.assert_close(plain, att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg))


def test_float32_is_the_tensor_path_up_to_rounding():
    batch = _batch(_users(4, long=True), 4)
    torch.manual_seed(4)
    att = MaskedTemporalSelfAttention(DIM, 4, dropout=0.2).train()
    rows = torch.randn(batch.num_rows, DIM, requires_grad=True)
    w_agg = torch.randn(DIM, requires_grad=True)
    out, ref, g_out, g_ref = _paths(att, batch, rows, w_agg, 4)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-6)
    for a, b in zip(g_out, g_ref):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dropout,mean", [(0.0, False), (0.4, False), (0.4, True)])
def test_gradcheck(dropout, mean):
    batch = _batch(_users(3)[:6], 3)
    heads, d_head = (2, DIM) if mean else (3, DIM // 3)
    torch.manual_seed(3)
    qkv = torch.randn(batch.num_rows, 3 * heads * d_head, dtype=torch.float64, requires_grad=True)
    w_agg = torch.randn(d_head if mean else DIM, dtype=torch.float64, requires_grad=True)

    def f(q, w):
        torch.manual_seed(7)  # the same mask at every evaluation
        return attention_train_kernel.aggregated(
            q, batch.absent_row, batch.node_count, batch.node_rows, batch.node_times, batch.node_len,
            batch.max_len, w, heads, d_head, mean, dropout,
        )  # fmt: skip

    assert torch.autograd.gradcheck(f, (qkv, w_agg), eps=1e-6, atol=1e-7)


def test_mask_layout_is_the_buckets():
    """Each node's mask block: its bucket's D and the bucket's layout, buckets in order."""
    batch = _batch(_users(2, long=True), 2)
    heads, T = 3, batch.max_len
    torch.manual_seed(0)
    mask, off, d, t = attention_train_kernel.draw_mask(batch.node_count.numpy(), heads, T, 0.5, torch.float64)
    assert t == T
    torch.manual_seed(0)
    base = 0
    for b in batch.attention:
        M_b, D = b.rows.shape
        draw = torch.nn.functional.dropout(torch.ones(M_b, heads, D, T, dtype=torch.float64), 0.5)
        nodes = b.nodes.numpy()
        assert (d[nodes] == D).all()
        assert (off[nodes] == base + np.arange(M_b) * heads * D * T).all()
        np.testing.assert_array_equal(mask[base : base + M_b * heads * D * T], draw.reshape(-1).numpy())
        base += M_b * heads * D * T
    assert base == len(mask) and set(np.unique(mask)) == {0.0, 2.0}


def test_no_nodes():
    empty = torch.zeros(0, dtype=torch.int64)
    qkv = torch.zeros(0, 3 * DIM, requires_grad=True)
    out = attention_train_kernel.aggregated(qkv, empty, empty, empty, empty, empty, 0, torch.zeros(DIM), 4, DIM // 4, False, 0.2)
    assert out.shape == (0, DIM)
    out.sum().backward()
    assert qkv.grad is not None and qkv.grad.shape == (0, 3 * DIM)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_items_listed_twice_in_a_basket_as_the_tensor_path(dropout):
    """Outside the data contract (ingestion drops repeats), but the training kernel still agrees
    with the tensor path, values and gradients: two present rows at one timestamp, both
    visible, the later one the query (its scores with the keys up to it are the ones computed)."""
    from basketgnn.data.split import Instances
    from basketgnn.graph.cooccurrence import build_user_graphs
    from tests.nn.test_attention_kernel import N_ITEMS
    from tests.support.raw_data import raw_basket_data

    rng = np.random.default_rng(9)
    users = [[[4, 3, 4], [1, 1], [2, 1, 0]], [[5, 5, 5], [5], [6, 5, 6], [7]]]
    users += [[rng.choice(6, size=4).tolist() for _ in range(int(rng.integers(2, 9)))] for _ in range(20)]
    inst = Instances(np.arange(len(users)), np.array([len(u) - 1 for u in users], dtype=np.int64))
    batch = build_user_graphs(raw_basket_data(users, N_ITEMS), inst).collate(np.arange(len(users)))
    times, node = batch.node_times.numpy(), np.repeat(np.arange(len(batch.node_count)), batch.node_count.numpy())
    assert ((np.diff(times) == 0) & (np.diff(node) == 0)).any()  # a node twice at one timestamp
    for merge, heads in (("concat", 3), ("mean", 2)):
        torch.manual_seed(0)
        att = MaskedTemporalSelfAttention(DIM, heads, merge, dropout).double().train()
        rows = torch.randn(batch.num_rows, DIM, dtype=torch.float64, requires_grad=True)
        w_agg = torch.randn(DIM, dtype=torch.float64, requires_grad=True)
        out, ref, g_out, g_ref = _paths(att, batch, rows, w_agg, 1)
        assert "AttentionReadout" in type(out.grad_fn).__name__
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
        for a, b in zip(g_out, g_ref):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
