"""The compiled attention + readout (``nn.attention_kernel``, used by
``MaskedTemporalSelfAttention.forward_nodes`` for inference on the CPU) against the dense
attention over the expanded [M, T, d] sequences and against the tensor path it stands in for;
when it applies; edge cases (one basket, an item in every basket, long histories, no nodes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from raw_data import raw_basket_data

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import GraphBatch, build_user_graphs
from basketgnn.jit import compiled_inference_applies
from basketgnn.nn import attention_kernel
from basketgnn.nn.aggregation import aggregate_nodes_temporal_feature, last_timestamp
from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention

N_ITEMS = 30
DIM = 12


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _users(seed: int, long: bool = False) -> list[list[list[int]]]:
    """Histories plus a target basket each: an item in every basket (no absent timestamp), one
    basket, one item, items bought once and many times, random baskets; ``long``: up to 40
    baskets."""
    rng = np.random.default_rng(seed)
    users = [
        [[0, 1], [0], [0, 2], [0, 3], [0], [4]],
        [[10, 11], [12]],
        [[5], [5]],
        [[7], [7], [7], [8]],  # item 7 at every timestamp
    ]
    for _ in range(12):
        T = int(rng.integers(1, 41 if long else 10))
        users.append([rng.choice(N_ITEMS, size=int(rng.integers(1, 6)), replace=False).tolist() for _ in range(T + 1)])
    return users


def _batch(users: list[list[list[int]]], seed: int = 0) -> GraphBatch:
    data = from_sequences(users, n_items=N_ITEMS)
    inst = Instances(np.arange(len(users)), np.array([len(u) - 1 for u in users], dtype=np.int64))
    order = np.random.default_rng(seed).permutation(len(users))
    return build_user_graphs(data, inst).collate(order)


def _dense(att: MaskedTemporalSelfAttention, rows: torch.Tensor, batch: GraphBatch, w_agg) -> torch.Tensor:
    """Attention over each node's full [T, d] sequence, then the readout (MODEL.md §2)."""
    seq = rows.index_select(0, batch.seq_row.reshape(-1)).view(*batch.seq_row.shape, -1)  # [M, T, d]
    out = att.forward(seq)
    return last_timestamp(out, batch.node_len) if w_agg is None else aggregate_nodes_temporal_feature(out, batch.node_len, w_agg)


@pytest.mark.parametrize("merge,heads", [("concat", 1), ("concat", 3), ("concat", 4), ("mean", 2)])
@pytest.mark.parametrize("readout", ["learned", "last"])
@pytest.mark.parametrize("seed,long", [(0, False), (1, False), (2, True)])
def test_compiled_readout_equals_dense_attention(merge, heads, readout, seed, long):
    batch = _batch(_users(seed, long), seed)
    torch.manual_seed(seed)
    att = MaskedTemporalSelfAttention(DIM, heads, merge).double().eval()
    rows = torch.randn(batch.num_rows, DIM, dtype=torch.float64)
    w_agg = torch.randn(DIM, dtype=torch.float64) if readout == "learned" else None
    with torch.no_grad():
        assert compiled_inference_applies(rows, att.qkv.weight, training=att.training, dropout=att.dropout)
        out = att.forward_nodes(rows, batch, w_agg)
        ref = _dense(att, rows, batch, w_agg)
        tensor_path = att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg)
    assert out.shape == ref.shape == (len(batch.node_item), DIM)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, tensor_path, rtol=1e-10, atol=1e-12)


def test_compiled_float32_is_the_tensor_path_up_to_rounding():
    batch = _batch(_users(4, long=True), 4)
    torch.manual_seed(4)
    att = MaskedTemporalSelfAttention(DIM, 4).eval()
    rows, w_agg = torch.randn(batch.num_rows, DIM), torch.randn(DIM)
    with torch.inference_mode():
        out = att.forward_nodes(rows, batch, w_agg)
        ref = att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-6)


def test_switching_the_kernel_off_takes_the_tensor_path(monkeypatch):
    batch = _batch(_users(5), 5)
    att = MaskedTemporalSelfAttention(DIM, 2).double().eval()
    rows = torch.randn(batch.num_rows, DIM, dtype=torch.float64)

    def fail(*args):
        raise AssertionError("compiled path taken")

    monkeypatch.setattr(attention_kernel, "aggregated", fail)
    att.compiled = False
    with torch.no_grad():
        att.forward_nodes(rows, batch, None)
    att.compiled = True
    with pytest.raises(AssertionError, match="compiled path taken"), torch.no_grad():
        att.forward_nodes(rows, batch, None)


def test_gradients_and_dropout_keep_the_tensor_path():
    rows = torch.randn(5, DIM, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(DIM))
    assert not compiled_inference_applies(rows)  # a gradient is needed
    with torch.no_grad():
        assert compiled_inference_applies(rows, weight)
    assert not compiled_inference_applies(rows.detach(), weight)  # the weight's gradient
    assert compiled_inference_applies(rows.detach(), weight.detach(), None)
    assert not compiled_inference_applies(rows.detach(), training=True, dropout=0.2)  # dropout acts
    assert compiled_inference_applies(rows.detach(), training=True, dropout=0.0)
    assert not compiled_inference_applies(rows.detach().half())
    # And the values and gradients through forward_nodes are the tensor path's: with rows that
    # need a gradient, and with frozen rows (e.g. frozen embeddings) but trainable weights.
    batch = _batch(_users(6), 6)
    att = MaskedTemporalSelfAttention(DIM, 2).double().train()
    for rows_grad in (True, False):
        x = torch.randn(batch.num_rows, DIM, dtype=torch.float64, requires_grad=rows_grad)
        w_agg = torch.nn.Parameter(torch.randn(DIM, dtype=torch.float64))
        out = att.forward_nodes(x, batch, w_agg)
        ref = att.forward_aggregated(x, batch.attention, len(batch.node_item), batch.node_len, w_agg)
        assert out.requires_grad
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        (g_out,) = torch.autograd.grad(out.sum(), [att.qkv.weight])
        (g_ref,) = torch.autograd.grad(ref.sum(), [att.qkv.weight])
        torch.testing.assert_close(g_out, g_ref, rtol=0, atol=0)


def test_no_nodes():
    out = attention_kernel.aggregated(
        torch.zeros(0, 3 * DIM), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
        torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
        torch.zeros(DIM), 4, DIM // 4, False,
    )  # fmt: skip
    assert out.shape == (0, DIM)


@pytest.mark.parametrize("merge,heads,readout", [("concat", 4, "learned"), ("mean", 2, "learned"), ("concat", 3, "last")])
def test_the_bought_once_path_has_the_general_loops_bits(merge, heads, readout):
    """Nodes bought once (most of them) take a two-key path; it repeats the general loop's
    operations in the same order, so its outputs are the same bits (float32 and float64)."""
    batch = _batch(_users(7, long=True), 7)
    assert (batch.node_count == 1).any() and (batch.node_count > 1).any()
    d_head = DIM // heads if merge == "concat" else DIM
    for dtype in (np.float32, np.float64):
        rng = np.random.default_rng(7)
        qkv = rng.normal(size=(batch.num_rows, 3 * heads * d_head)).astype(dtype)
        w_agg = rng.normal(size=heads * d_head if merge == "concat" else d_head).astype(dtype)
        if readout == "last":
            w_agg = w_agg[:0]
        offsets = np.concatenate([[0], np.cumsum(batch.node_count.numpy())])
        outs = []
        for once_path in (True, False):
            out = np.empty((len(batch.absent_row), heads * d_head if merge == "concat" else d_head), dtype)
            attention_kernel.attention_readout(
                qkv, batch.absent_row.numpy(), offsets, batch.node_rows.numpy(), batch.node_times.numpy(),
                batch.node_len.numpy(), w_agg, heads, d_head, merge == "mean", out, once_path,
            )  # fmt: skip
            outs.append(out)
        np.testing.assert_array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))


def test_items_listed_twice_in_a_basket_as_the_tensor_path():
    """Outside the data contract (ingestion drops repeats), but the two paths still agree: two
    present rows at one timestamp, both visible, the timestamp counted once."""
    rng = np.random.default_rng(8)
    users = [[[4, 3, 4], [1, 1], [2, 1, 0]], [[5, 5, 5], [5], [6, 5, 6], [7]]]
    users += [[rng.choice(6, size=4).tolist() for _ in range(int(rng.integers(2, 9)))] for _ in range(20)]
    data = raw_basket_data(users, N_ITEMS)
    inst = Instances(np.arange(len(users)), np.array([len(u) - 1 for u in users], dtype=np.int64))
    batch = build_user_graphs(data, inst).collate(np.arange(len(users)))
    times, node = batch.node_times.numpy(), np.repeat(np.arange(len(batch.node_count)), batch.node_count.numpy())
    assert ((np.diff(times) == 0) & (np.diff(node) == 0)).any()  # a node twice at one timestamp
    for merge, heads in (("concat", 3), ("mean", 2)):
        att = MaskedTemporalSelfAttention(DIM, heads, merge).double().eval()
        rows = torch.randn(batch.num_rows, DIM, dtype=torch.float64)
        for w_agg in (torch.randn(DIM, dtype=torch.float64), None):
            with torch.no_grad():
                out = att.forward_nodes(rows, batch, w_agg)
                ref = att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg)
            torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
