"""Masked temporal self-attention (DNNTSP's temporal step): the dense ``forward`` against a plain loop
reference, its independence of padding, and ``forward_rows`` (distinct rows + log-count buckets)
against ``forward`` on the expanded sequences ``rows[seq_row]``, values and gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import GraphBatch, build_user_graphs
from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention

N_ITEMS = 16
DIM = 8

# (merge, heads, dropout): dropout only matters in training mode; these tests run in eval mode.
CONFIGS = [
    ("concat", 2, 0.0),
    ("concat", 4, 0.0),
    ("concat", 1, 0.0),
    ("mean", 3, 0.0),
    ("concat", 2, 0.3),
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _module(merge: str, heads: int, dropout: float = 0.0, seed: int = 0):
    torch.manual_seed(seed)
    return MaskedTemporalSelfAttention(DIM, heads, merge, dropout).double().eval()


def _multi_counts_user(rng: np.random.Generator, T: int) -> list[list[int]]:
    """T history baskets where item k + 1 is bought at k random timestamps, k = 1..T (item T is
    in every basket), plus a target basket."""
    baskets: list[list[int]] = [[] for _ in range(T)]
    for k in range(1, T + 1):
        for t in rng.choice(T, size=k, replace=False):
            baskets[t].append(k)
    return baskets + [[0]]


def _sequences(seed: int) -> list[list[list[int]]]:
    rng = np.random.default_rng(seed)
    users = [
        [[0, 1], [0], [0, 2], [0, 3], [0], [4]],  # T = 5, item 0 at every timestamp
        _multi_counts_user(rng, 7),  # bought 1..7 times: several bucket sizes, padded columns
        [[10, 11], [12]],  # T = 1
        [[5], [5]],  # T = 1, N = 1
        _multi_counts_user(rng, 3),
    ]
    for _ in range(8):
        T = int(rng.integers(1, 9))
        users.append(
            [rng.integers(N_ITEMS, size=int(rng.integers(1, 5))).tolist() for _ in range(T + 1)]
        )
    return users


def _batch(seed: int, order: np.ndarray | None = None) -> GraphBatch:
    seqs = _sequences(seed)
    data = from_sequences(seqs, n_items=N_ITEMS)
    inst = Instances(np.arange(len(seqs)), np.array([len(s) - 1 for s in seqs], dtype=np.int64))
    g = build_user_graphs(data, inst)
    return g.collate(np.arange(len(seqs)) if order is None else order)


def _real(batch: GraphBatch) -> torch.Tensor:
    """[M, T_max] True at each node's real positions t < T_node."""
    return torch.arange(batch.max_len)[None, :] < batch.node_len[:, None]


def _all_t1_batch() -> GraphBatch:
    seqs = [[[1, 2], [3]], [[4], [1]], [[1, 1, 5], [2]]]
    data = from_sequences(seqs, n_items=N_ITEMS)
    g = build_user_graphs(data, Instances(np.arange(3), np.ones(3, dtype=np.int64)))
    return g.collate(np.array([2, 0, 1]))


@pytest.mark.parametrize("merge,heads,dropout", CONFIGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_forward_rows_equals_dense_forward_on_expanded_sequences(merge, heads, dropout, seed):
    batch = _batch(seed, np.random.default_rng(seed).permutation(len(_sequences(seed))))
    _check_rows_vs_dense(batch, _module(merge, heads, dropout, seed), seed)


@pytest.mark.parametrize("merge,heads", [("concat", 2), ("mean", 3)])
def test_forward_rows_equals_dense_forward_when_every_user_has_one_basket(merge, heads):
    batch = _all_t1_batch()
    assert batch.max_len == 1
    _check_rows_vs_dense(batch, _module(merge, heads), seed=5)


def _check_rows_vs_dense(batch: GraphBatch, att: MaskedTemporalSelfAttention, seed: int) -> None:
    torch.manual_seed(100 + seed)
    M, T = len(batch.node_item), batch.max_len
    R = batch.num_rows
    real = _real(batch)  # [M, T]
    # a node present at every one of its timestamps, and a node bought once, are both there
    present_count = torch.zeros(M, dtype=torch.int64).index_add_(
        0, batch.row_node, batch.row_present.long()
    )
    assert (present_count == batch.node_len).any() and (present_count == 1).any()

    rows = torch.randn(R, DIM, dtype=torch.float64, requires_grad=True)
    out_rows = att.forward_rows(rows, batch.attention, M, T)  # [M, T, d]
    out_dense = att(rows[batch.seq_row])  # [M, T, d]
    assert out_rows.shape == out_dense.shape == (M, T, DIM)
    assert out_rows.dtype == torch.float64
    # finite everywhere (padding is masked by multiplication later, so NaN there would leak)
    assert torch.isfinite(out_rows).all()
    diff = (out_rows - out_dense).abs()[real]
    assert diff.max().item() < 1e-12

    w = torch.randn(M, T, DIM, dtype=torch.float64) * real.unsqueeze(-1)
    params = [att.qkv.weight, rows]
    g_rows = torch.autograd.grad((w * out_rows).sum(), params)
    g_dense = torch.autograd.grad((w * out_dense).sum(), params)
    for a, b in zip(g_rows, g_dense, strict=True):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (a - b).abs().max()
    assert g_rows[1].abs().sum() > 0


def _loop_reference(att: MaskedTemporalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Per node, per head: softmax(q k^T / sqrt(d_head) with an explicit t' <= t mask) v, heads
    concatenated or averaged. Uses the module's qkv weight, whose rows are (q|k|v, head, d_head)."""
    H, dh = att.heads, att.d_head
    W = att.qkv.weight.view(3, H, dh, -1)  # [3, heads, d_head, d]
    n, T, _ = x.shape
    out = torch.zeros(n, T, x.shape[2], dtype=x.dtype)
    for m in range(n):
        heads = []
        for h in range(H):
            q, k, v = (x[m] @ W[j, h].T for j in range(3))  # each [T, d_head]
            z = torch.zeros(T, dh, dtype=x.dtype)
            for t in range(T):
                s = torch.stack([q[t] @ k[u] for u in range(t + 1)]) / math.sqrt(dh)
                a = torch.exp(s - s.max())
                a = a / a.sum()
                z[t] = sum(a[u] * v[u] for u in range(t + 1))
            heads.append(z)
        out[m] = torch.cat(heads, dim=1) if att.merge == "concat" else torch.stack(heads).mean(0)
    return out


@pytest.mark.parametrize("merge,heads,dropout", CONFIGS)
@pytest.mark.parametrize("T", [1, 2, 6])
def test_dense_forward_matches_loop_reference(merge, heads, dropout, T):
    att = _module(merge, heads, dropout, seed=T)
    expected_d_head = DIM // heads if merge == "concat" else DIM
    assert att.d_head == expected_d_head
    assert att.qkv.weight.shape == (3 * heads * expected_d_head, DIM) and att.qkv.bias is None
    x = torch.randn(5, T, DIM, dtype=torch.float64)
    with torch.no_grad():
        out = att(x)
        ref = _loop_reference(att, x)
    assert out.shape == (5, T, DIM)
    assert torch.allclose(out, ref, rtol=0, atol=1e-12), (out - ref).abs().max()


@pytest.mark.parametrize("merge,heads", [("concat", 2), ("mean", 3)])
def test_dense_forward_ignores_padding(merge, heads):
    att = _module(merge, heads, seed=7)
    torch.manual_seed(7)
    lengths = [1, 3, 5, 2, 5]
    T = max(lengths)
    x = torch.randn(len(lengths), T, DIM, dtype=torch.float64)
    with torch.no_grad():
        alone = [att(x[m : m + 1, :L])[0] for m, L in enumerate(lengths)]  # no padding at all
        for extra in (0, 1, 4):
            noisy = torch.cat([x, torch.randn(len(lengths), extra, DIM, dtype=x.dtype)], dim=1)
            for m, L in enumerate(lengths):
                noisy[m, L:] = 1e3 * torch.randn(T + extra - L, DIM, dtype=x.dtype)
            out = att(noisy)
            assert out.shape == (len(lengths), T + extra, DIM)
            for m, L in enumerate(lengths):
                assert torch.allclose(out[m, :L], alone[m], rtol=0, atol=1e-12), (m, extra)


def test_concat_needs_divisible_dim():
    with pytest.raises(ValueError):
        MaskedTemporalSelfAttention(DIM, heads=3, merge="concat")
    assert MaskedTemporalSelfAttention(DIM, heads=3, merge="mean").d_head == DIM


@pytest.mark.parametrize("training", [False, True])
def test_two_key_closed_form_equals_the_general_path_with_and_without_dropout(training):
    """Nodes bought once take the closed form; in training mode, with the same seed, dropout
    draws the same mask as the general keys-first path, so outputs and gradients agree too."""
    batch = _batch(0)
    module = _module("concat", 2, dropout=0.3).train(training)
    rows = torch.randn(int(batch.row_node.shape[0]), DIM, dtype=torch.float64, requires_grad=True)
    two = [b for b in batch.attention if b.rows.shape[1] == 2]
    assert two and len(two[0].nodes) > 5, "the batch must have a two-key bucket"
    b = two[0]
    scale = module.d_head**-0.5

    def run(attend):
        x = rows.index_select(0, b.rows.reshape(-1)).view(*b.rows.shape, DIM)
        torch.manual_seed(7)
        out = attend(*module._split(x), b, scale)
        (grad,) = torch.autograd.grad(out.square().sum(), rows)
        return out.detach(), grad

    closed, g_closed = run(module._two_keys)
    general, g_general = run(module._keys_first)
    torch.testing.assert_close(closed, general, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_closed, g_general, rtol=1e-10, atol=1e-12)
    if training:  # dropout really acted: some weights were zeroed
        module.eval()
        assert not torch.allclose(run(module._two_keys)[0], closed)


@pytest.mark.parametrize("merge,heads,dropout", CONFIGS)
@pytest.mark.parametrize("readout", ["learned", "last"])
@pytest.mark.parametrize("training", [False, True])
def test_forward_aggregated_equals_readout_of_forward_rows(merge, heads, dropout, readout, training):
    """The fused attention + readout equals the temporal readout of the full sequences:
    values and gradients, in eval mode and, with the same seed (same dropout masks), in training."""
    from basketgnn.nn.aggregation import aggregate_nodes_temporal_feature, last_timestamp

    batch = _batch(3, np.random.default_rng(3).permutation(len(_sequences(3))))
    att = _module(merge, heads, dropout, 3).train(training)
    M, T, R = len(batch.node_item), batch.max_len, batch.num_rows
    torch.manual_seed(11)
    rows = torch.randn(R, DIM, dtype=torch.float64, requires_grad=True)
    w_agg = torch.randn(DIM, dtype=torch.float64, requires_grad=True) if readout == "learned" else None

    def dense():
        torch.manual_seed(5)
        seq = att.forward_rows(rows, batch.attention, M, T)  # [M, T, d]
        if w_agg is None:
            return last_timestamp(seq, batch.node_len)
        return aggregate_nodes_temporal_feature(seq, batch.node_len, w_agg)

    def fused():
        torch.manual_seed(5)
        return att.forward_aggregated(rows, batch.attention, M, batch.node_len, w_agg)

    ref, out = dense(), fused()
    assert out.shape == ref.shape == (M, DIM)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    params = [rows, att.qkv.weight] + ([w_agg] if w_agg is not None else [])
    weight = torch.randn(M, DIM, dtype=torch.float64)
    g_ref = torch.autograd.grad((weight * dense()).sum(), params)
    g_out = torch.autograd.grad((weight * fused()).sum(), params)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    if training and dropout > 0:  # dropout really acted on the fused path too
        att.eval()
        assert not torch.allclose(fused(), out)
