"""The compiled attention + readout (``nn.attention_kernel``, used by
``MaskedTemporalSelfAttention.forward_nodes`` for inference on the CPU) against the dense
attention over the expanded [M, T, d] sequences and against the tensor path it stands in for;
when it applies; edge cases (one basket, an item in every basket, long histories, no nodes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import GraphBatch, build_user_graphs
from basketgnn.jit import compiled_inference_applies
from basketgnn.nn import attention_kernel
from basketgnn.nn.aggregation import aggregate_nodes_temporal_feature, last_timestamp
from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention
from tests.support.raw_data import raw_basket_data

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
    """Attention over each node's full [T, d] sequence, then the temporal readout."""
    seq = rows.index_select(0, batch.seq_row.reshape(-1)).view(*batch.seq_row.shape, -1)  # [M, T, d]
    out = att.forward(seq)
    return last_timestamp(out, batch.node_len) if w_agg is None else aggregate_nodes_temporal_feature(out, batch.node_len, w_agg)


# 4 heads of 8 (concat 32, mean 8): DNNTSP's default head shape.
@pytest.mark.parametrize(
    "merge,heads,dim",
    [("concat", 1, DIM), ("concat", 3, DIM), ("concat", 4, DIM), ("mean", 2, DIM), ("concat", 4, 32), ("mean", 4, 8)],
)
@pytest.mark.parametrize("readout", ["learned", "last"])
@pytest.mark.parametrize("seed,long", [(0, False), (1, False), (2, True)])
def test_compiled_readout_equals_dense_attention(merge, heads, dim, readout, seed, long):
    batch = _batch(_users(seed, long), seed)
    torch.manual_seed(seed)
    att = MaskedTemporalSelfAttention(dim, heads, merge).double().eval()
    rows = torch.randn(batch.num_rows, dim, dtype=torch.float64)
    w_agg = torch.randn(dim, dtype=torch.float64) if readout == "learned" else None
    with torch.no_grad():
        assert compiled_inference_applies(rows, att.qkv.weight, training=att.training, dropout=att.dropout)
        out = att.forward_nodes(rows, batch, w_agg)
        ref = _dense(att, rows, batch, w_agg)
        tensor_path = att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg)
    assert out.shape == ref.shape == (len(batch.node_item), dim)
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


# d_head 2 (learned): the folded width equals d_head; d_head 1: wider than it.
@pytest.mark.parametrize(
    "merge,heads,dim", [("concat", 4, 32), ("concat", 3, DIM), ("mean", 2, DIM), ("concat", 4, 8), ("concat", 4, 4)]
)
@pytest.mark.parametrize("readout", ["learned", "last"])
@pytest.mark.parametrize("seed,long", [(0, False), (2, True)])
def test_output_on_one_direction_from_values_projected_first(monkeypatch, merge, heads, dim, readout, seed, long):
    """forward_nodes_dot: the kernel on values folded to the readout's and w_out's direction
    (two numbers per head, one with the "last" readout) gives w_out . z of the dense attention
    and of forward_nodes; with a gradient it is forward_nodes(...) @ w_out itself."""
    batch = _batch(_users(seed, long), seed)
    torch.manual_seed(seed)
    att = MaskedTemporalSelfAttention(dim, heads, merge).double().eval()
    rows = torch.randn(batch.num_rows, dim, dtype=torch.float64)
    w_agg = torch.randn(dim, dtype=torch.float64) if readout == "learned" else None
    w_out = torch.randn(dim, dtype=torch.float64)
    widths = []
    kernel = attention_kernel.aggregated

    def spy(qkv, *args):
        widths.append((qkv.shape[1], args[-1]))
        return kernel(qkv, *args)

    monkeypatch.setattr(attention_kernel, "aggregated", spy)
    with torch.no_grad():
        dot = att.forward_nodes_dot(rows, batch, w_agg, w_out)
        ref = _dense(att, rows, batch, w_agg) @ w_out
    d_head, d_v = att.d_head, 1 if w_agg is None else 2
    assert widths == [(2 * heads * d_head + heads * d_v, d_v)]
    assert dot.shape == (len(batch.node_item),)
    torch.testing.assert_close(dot, ref, rtol=1e-10, atol=1e-12)
    w_out.requires_grad_(True)
    with_grad = att.forward_nodes_dot(rows, batch, w_agg, w_out)
    assert with_grad.requires_grad and len(widths) == 1  # the training path, then the product
    torch.testing.assert_close(with_grad.detach(), ref, rtol=1e-10, atol=1e-12)


def test_output_on_one_direction_in_float32():
    batch = _batch(_users(4, long=True), 4)
    torch.manual_seed(4)
    att = MaskedTemporalSelfAttention(32, 4).eval()
    rows, w_agg, w_out = torch.randn(batch.num_rows, 32), torch.randn(32), torch.randn(32)
    with torch.inference_mode():
        dot = att.forward_nodes_dot(rows, batch, w_agg, w_out)
        ref = att.forward_aggregated(rows, batch.attention, len(batch.node_item), batch.node_len, w_agg) @ w_out
    assert dot.dtype == torch.float32
    torch.testing.assert_close(dot, ref, rtol=2e-5, atol=2e-5)


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


def test_gradients_and_dropout_leave_the_inference_kernel():
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
    # And the values and gradients through forward_nodes (then the training kernel,
    # nn.attention_train_kernel) are the tensor path's up to rounding: with rows that need a
    # gradient, and with frozen rows (e.g. frozen embeddings) but trainable weights.
    batch = _batch(_users(6), 6)
    att = MaskedTemporalSelfAttention(DIM, 2).double().train()
    for rows_grad in (True, False):
        x = torch.randn(batch.num_rows, DIM, dtype=torch.float64, requires_grad=rows_grad)
        w_agg = torch.nn.Parameter(torch.randn(DIM, dtype=torch.float64))
        out = att.forward_nodes(x, batch, w_agg)
        ref = att.forward_aggregated(x, batch.attention, len(batch.node_item), batch.node_len, w_agg)
        assert out.requires_grad
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
        (g_out,) = torch.autograd.grad(out.sum(), [att.qkv.weight])
        (g_ref,) = torch.autograd.grad(ref.sum(), [att.qkv.weight])
        torch.testing.assert_close(g_out, g_ref, rtol=1e-9, atol=1e-11)


def test_no_nodes():
    out = attention_kernel.aggregated(
        torch.zeros(0, 3 * DIM), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
        torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
        torch.zeros(DIM), 4, DIM // 4, False,
    )  # fmt: skip
    assert out.shape == (0, DIM)


@pytest.mark.parametrize(
    "merge,heads,dim,readout",
    [("concat", 4, DIM, "learned"), ("mean", 2, DIM, "learned"), ("concat", 3, DIM, "last"), ("concat", 4, 32, "learned")],
)
def test_the_bought_once_path_has_the_general_loops_bits(merge, heads, dim, readout):
    """With the softmax at every t, nodes bought once (most of them) take a two-key path; it
    repeats the general loop's operations in the same order, so its outputs are the same bits
    (float32 and float64)."""
    batch = _batch(_users(7, long=True), 7)
    assert (batch.node_count == 1).any() and (batch.node_count > 1).any()
    d_head = dim // heads if merge == "concat" else dim
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
                batch.node_len.numpy(), w_agg, heads, d_head, d_head, merge == "mean", out, once_path, False,
            )  # fmt: skip
            outs.append(out)
        np.testing.assert_array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_default_sizes_copy_has_the_general_copys_bits(dtype):
    """At DNNTSP's default sizes (4 heads of 8, values folded to two numbers a head, learned
    readout, concat) the kernel runs a copy compiled with those sizes as constants: the same
    bits as the general copy, for nodes bought once and the others."""
    batch = _batch(_users(7, long=True), 7)
    assert (batch.node_count == 1).any() and (batch.node_count > 1).any()
    heads, d_head, d_v = 4, 8, 2
    rng = np.random.default_rng(11)
    qkv = rng.normal(size=(batch.num_rows, 2 * heads * d_head + heads * d_v)).astype(dtype)
    select = np.tile(np.array([1.0, 0.0], dtype), heads)
    offsets = np.concatenate([[0], np.cumsum(batch.node_count.numpy())])
    outs = []
    for specialise in (True, False):
        out = np.empty((len(batch.absent_row), heads * d_v), dtype)
        attention_kernel.attention_readout(
            qkv, batch.absent_row.numpy(), offsets, batch.node_rows.numpy(), batch.node_times.numpy(),
            batch.node_len.numpy(), select, heads, d_head, d_v, False, out, True, True, specialise,
        )  # fmt: skip
        outs.append(out)
    np.testing.assert_array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))
    assert np.isfinite(outs[0]).all() and np.abs(outs[0]).max() > 0


def _readout(batch, qkv, w_agg, heads, d_head, mean_heads, closed_form):
    offsets = np.concatenate([[0], np.cumsum(batch.node_count.numpy())])
    out = np.empty((len(batch.absent_row), d_head if mean_heads else heads * d_head), qkv.dtype)
    attention_kernel.attention_readout(
        qkv, batch.absent_row.numpy(), offsets, batch.node_rows.numpy(), batch.node_times.numpy(),
        batch.node_len.numpy(), w_agg, heads, d_head, d_head, mean_heads, out, True, closed_form,
    )  # fmt: skip
    return out


def _long_big_baskets(seed: int) -> list[list[list[int]]]:
    """Histories of up to 60 baskets with up to 300 items each from a 400-item catalogue (most
    items bought many times), plus items bought once early, late and at t = 0."""
    rng = np.random.default_rng(seed)
    users = [[[0, 1]] + [[2] for _ in range(59)] + [[3]], [[5]] * 30 + [[6, 5]] + [[7]]]
    for _ in range(6):
        T = int(rng.integers(20, 61))
        users.append([np.unique(rng.integers(0, 400, size=int(rng.integers(1, 301)))).tolist() for _ in range(T + 1)])
    return users


@pytest.mark.parametrize(
    "merge,heads,dim,readout",
    [("concat", 4, DIM, "learned"), ("mean", 2, DIM, "learned"), ("concat", 3, DIM, "last"), ("concat", 4, 32, "learned")],
)
@pytest.mark.parametrize("case", ["long", "big"])
def test_closed_form_equals_the_softmax_at_every_t(merge, heads, dim, readout, case):
    """The closed form (exponentials once per query column, sums over t from prefix sums)
    against the softmax taken at every t, float64: long histories, and hundreds of items a
    basket over up to 60 baskets."""
    users = _users(9, long=True) if case == "long" else _long_big_baskets(9)
    data = from_sequences(users, n_items=400)
    inst = Instances(np.arange(len(users)), np.array([len(u) - 1 for u in users], dtype=np.int64))
    batch = build_user_graphs(data, inst, max_history=0).collate(np.arange(len(users)))
    assert (batch.node_count == 1).any() and batch.node_count.max() >= (20 if case == "big" else 5)
    d_head = dim // heads if merge == "concat" else dim
    rng = np.random.default_rng(9)
    qkv = rng.normal(size=(batch.num_rows, 3 * heads * d_head))
    w_agg = rng.normal(size=heads * d_head if merge == "concat" else d_head)[: 0 if readout == "last" else None]
    got = _readout(batch, qkv, w_agg, heads, d_head, merge == "mean", True)
    want = _readout(batch, qkv, w_agg, heads, d_head, merge == "mean", False)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())


def test_closed_form_with_scores_far_apart():
    """Scores spread wider than exp can span (some shifted exponentials are 0): nodes bought
    once keep finite weights (their norm holds exp(0) = 1); other nodes take the softmax at
    every t. Both as the reference."""
    batch = _batch(_users(10, long=True), 10)
    rng = np.random.default_rng(10)
    heads, d_head = 2, DIM // 2
    qkv = rng.normal(size=(batch.num_rows, 3 * heads * d_head)) * 40.0  # scores up to ~10^3
    w_agg = rng.normal(size=heads * d_head)
    got = _readout(batch, qkv, w_agg, heads, d_head, False, True)
    want = _readout(batch, qkv, w_agg, heads, d_head, False, False)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


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


# --- the kernel's helpers, one node at a time, against the formulas written out -------------


def _node_case(seed: int, heads: int, d_head: int, mean_heads: bool):
    """One node: absent row 0 and present rows 1..3 bought at t = 1, 2, 4 of L = 6."""
    rng = np.random.default_rng(seed)
    qkv = rng.normal(size=(5, 3 * heads * d_head))
    rows = np.array([0, 3, 1, 4], dtype=np.int64)
    w_agg = rng.normal(size=d_head if mean_heads else heads * d_head)
    return qkv, rows, w_agg, np.array([1, 2, 4], dtype=np.int64), 6


def _split(qkv, rows, heads, d_head):
    """q, k, v of the node's rows: [heads, D, d_head] each."""
    q, k, v = np.split(qkv[rows], 3, axis=1)
    return [a.reshape(len(rows), heads, d_head).transpose(1, 0, 2) for a in (q, k, v)]


@pytest.mark.parametrize("heads,d_head,mean_heads", [(2, 3, False), (3, 2, True)])
def test_scores_and_value_weights(heads, d_head, mean_heads):
    qkv, rows, w_agg, _, _ = _node_case(0, heads, d_head, mean_heads)
    D = len(rows)
    s, vw = np.full((heads, D, D), np.nan), np.zeros((heads, D))
    attention_kernel._scores(qkv, rows, D, w_agg, True, heads, d_head, d_head, mean_heads, d_head**-0.5, s, vw)
    q, k, v = _split(qkv, rows, heads, d_head)
    # The entries a query reads: the absent column 0 with every key, a present column c with
    # the keys up to c; the others are not computed (left NaN here).
    read = np.tril(np.ones((D, D), bool))
    read[0] = True
    expected = q @ k.transpose(0, 2, 1) / np.sqrt(d_head)  # [heads, D, D]
    np.testing.assert_allclose(s[:, read], expected[:, read], rtol=1e-12)
    assert np.isnan(s[:, ~read]).all()
    w = np.broadcast_to(w_agg, (heads, d_head)) if mean_heads else w_agg.reshape(heads, d_head)
    np.testing.assert_allclose(vw, np.einsum("hyi,hi->hy", v, w) / (heads if mean_heads else 1), rtol=1e-12)


@pytest.mark.parametrize("has_w", [True, False])
def test_key_sums_are_the_causal_softmax_weighted_by_the_readout(has_w):
    """cs[h, y] = sum_t a_t A_h[y, t], with A the softmax at t over the visible keys (the absent
    row with log of its count of absent timestamps so far, the purchases up to t), the query
    the row of t, and a_t the readout weight (learned, or 1 at the last t)."""
    heads, d_head = 2, 3
    qkv, rows, w_agg, times, L = _node_case(1, heads, d_head, False)
    D = len(rows)
    s, vw = np.empty((heads, D, D)), np.zeros((heads, D))
    attention_kernel._scores(qkv, rows, D, w_agg, has_w, heads, d_head, d_head, False, d_head**-0.5, s, vw)
    log_n = np.array([-np.inf] + [np.log(i) for i in range(1, L + 1)])
    w, cs = np.zeros((heads, D)), np.zeros((heads, D))
    attention_kernel._key_sums(s, vw, times, L, has_w, heads, log_n, w, cs)
    expected = np.zeros((heads, D))
    for t in range(L):
        bought = [j + 1 for j in range(len(times)) if times[j] <= t]
        n_absent = t + 1 - len(bought)
        c = bought[-1] if t in times else 0
        keys = ([0] if n_absent else []) + bought
        logits = np.array([[s[h, c, y] + (np.log(n_absent) if y == 0 else 0.0) for y in keys] for h in range(heads)])
        A = np.exp(logits - logits.max(1, keepdims=True))
        A /= A.sum(1, keepdims=True)
        a_t = (A * vw[:, keys]).sum() if has_w else float(t == L - 1)
        expected[:, keys] += a_t * A
    np.testing.assert_allclose(cs, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("heads,d_head,mean_heads", [(2, 3, False), (3, 2, True)])
def test_node_output_weights_the_values(heads, d_head, mean_heads):
    qkv, rows, _, _, _ = _node_case(2, heads, d_head, mean_heads)
    cs = np.random.default_rng(3).normal(size=(heads, len(rows)))
    out = np.full(d_head if mean_heads else heads * d_head, np.nan)
    attention_kernel._node_output(qkv, rows, len(rows), cs, heads, d_head, d_head, mean_heads, out)
    _, _, v = _split(qkv, rows, heads, d_head)
    z = np.einsum("hy,hyi->hi", cs, v)  # [heads, d_head]
    np.testing.assert_allclose(out, z.mean(0) if mean_heads else z.reshape(-1), rtol=1e-12)
