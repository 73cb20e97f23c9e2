"""The temporal attention and its readout for training on the CPU: compiled (numba) forward
and backward behind a ``torch.autograd.Function``, the same computation as
``MaskedTemporalSelfAttention.forward_aggregated`` (dropout on the attention weights included)
node by node, without the [nodes, heads, D, T] tensors or autograd's bookkeeping over them.

For a node with D distinct rows (column 0 its absent row, 1..P its present rows in time order)
and its user's history length L, per head h and real timestamp t < L (query column c_t, keys
visible at t: the absent row with bias log n_t, n_t the absent timestamps up to t, and the
purchases up to t):

    s[c, y]  = (q_c . k_y) / sqrt(d_head)
    A[t, y]  = softmax over the visible y of s[c_t, y] + (log n_t if y = 0)
    Ã[t, y]  = A[t, y] · m[y, t]             (m: dropout's mask scaled by 1 / (1 - p), else 1)
    vw[y]    = v_y . w_agg_h                  (/ heads when the heads are averaged)
    a_t      = sum_h sum_y Ã_h[t, y] vw_h[y]  ("last" readout: a_t = 1 at t = L - 1, else 0)
    cs[y]    = sum_t a_t Ã[t, y]
    z_h      = sum_y cs[y] v_y;   out = concat_h z_h  (mean: averaged)

and with g = dLoss/dz_h (g / heads when averaged), the backward:

    gv[y]    = v_y . g                        dv_y += cs[y] g
    da_t     = sum_h sum_y Ã_h[t, y] gv_h[y]  (learned readout only)
    dÃ[t, y] = a_t gv[y] + da_t vw[y]         dvw[y] = sum_t da_t Ã[t, y]
    dA       = dÃ · m;   dl[t, y] = A[t, y] (dA[t, y] - sum_y' A[t, y'] dA[t, y'])
    ds[c_t, y] += dl[t, y];   dq_c += scale sum_y ds[c, y] k_y;   dk_y += scale sum_c ds[c, y] q_c
    dv_y += dvw[y] w_agg_h;   dw_agg_h += sum_y dvw[y] v_y  (both / heads when averaged)

Dropout's mask is drawn by torch (:func:`draw_mask`) on the tensor path's layout and in its
order, bucket by bucket, and read in that layout ([H, D_b, T] per node): for the same seed both
paths drop the same weights, so training runs agree up to float rounding. Sums run in float64.
Where the absent row queries (no purchase at t) the weights need no softmax: with
E_y = exp(s[0, y] - top) fixed between purchases, they are n_t E_0 / (n_t E_0 + sum_{y>0} E_y)
and E_y / (...). The kernels keep the heads innermost in their own arrays ([t, y, h] layouts),
so the per-head work at each t runs as independent chains.

Shapes: R rows, M nodes, P_b present rows in the batch, H heads, T the batch's longest history.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import torch

from basketgnn.jit import DEFAULT_D_HEAD, DEFAULT_HEADS, jit_options
from basketgnn.nn.attention_kernel import _node_output

# Every divisor is a softmax's sum (≥ 1: its largest term is exp(0)) or the number of heads.
_JIT = {**jit_options(__file__), "error_model": "numpy"}


@numba.njit(**_JIT, inline="always")
def _scores(qkv, rows, D, heads, d_head, scale, s):  # pragma: no cover - jit
    """Into ``s[c, y, h]`` the node's scaled scores that the weights read: the absent row's
    (c = 0) with every key, a present column c's with the keys y <= c (it queries at its
    purchase, when the keys after it are not visible yet; of columns bought at the same t the
    last one queries). The other entries are left as they are."""
    HD = heads * d_head
    for h in range(heads):
        q0, k0 = h * d_head, HD + h * d_head
        for c in range(D):
            for y in range(D if c == 0 else c + 1):
                acc = 0.0
                for i in range(d_head):
                    acc += qkv[rows[c], q0 + i] * qkv[rows[y], k0 + i]
                s[c, y, h] = acc * scale


@numba.njit(**_JIT, inline="always")
def _value_weights(qkv, rows, D, w_agg, has_w, heads, d_head, mean_heads, vw):  # pragma: no cover - jit
    """Into ``vw[y, h]`` each value's readout weight v_y . w_agg_h (0 without a learned
    readout)."""
    HD = heads * d_head
    for h in range(heads):
        v0 = 2 * HD + h * d_head
        w0 = 0 if mean_heads else h * d_head
        for y in range(D):
            acc = 0.0
            if has_w:
                for i in range(d_head):
                    acc += qkv[rows[y], v0 + i] * w_agg[w0 + i]
            vw[y, h] = acc / heads if mean_heads else acc


@numba.njit(**_JIT, inline="always")
def _softmax(s, c, seen, n_absent, log_n, heads, A, t):  # pragma: no cover - jit
    """``A[t, :seen + 1, h]``: the softmax over the visible keys of query column c, the absent
    key with bias log n_absent (none when 0), the largest logit's exp taken as 1."""
    bias = log_n[n_absent]  # -inf when no absent timestamp so far
    for h in range(heads):
        best, top = 0, s[c, 0, h] + bias
        for y in range(1, seen + 1):
            if s[c, y, h] > top:
                best, top = y, s[c, y, h]
        norm = 0.0
        for y in range(seen + 1):
            e = 1.0 if y == best else math.exp(s[c, y, h] + (bias if y == 0 else 0.0) - top)
            A[t, y, h] = e
            norm += e
        inv = 1.0 / norm
        for y in range(seen + 1):
            A[t, y, h] *= inv


@numba.njit(**_JIT, inline="always")
def _absent_query(s, seen, heads, E, Sp):  # pragma: no cover - jit
    """For the timestamps where the absent row queries (no purchase at t) and ``seen`` present
    keys are visible: ``E[y, h] = exp(s[0, y, h] - top)`` and ``Sp[h]`` the present keys' sum,
    so that the weights at t, with n absent timestamps so far, are n E_0 / (n E_0 + Sp) and
    E_y / (n E_0 + Sp): one division per t instead of a softmax."""
    for h in range(heads):
        top = s[0, 0, h]
        for y in range(1, seen + 1):
            top = max(top, s[0, y, h])
        total = 0.0
        for y in range(seen + 1):
            E[y, h] = math.exp(s[0, y, h] - top)
            total += E[y, h] if y > 0 else 0.0
        Sp[h] = total


@numba.njit(**_JIT, inline="always")
def _weights_at(s, t, c, seen, n_absent, segment, P, heads, log_n, A, E, Sp, inv):  # pragma: no cover - jit
    """``A[t, y, h]`` for every key (0 where not visible); returns the visible keys for which
    E and Sp now hold (``segment``)."""
    for y in range(seen + 1, P + 1):
        for h in range(heads):
            A[t, y, h] = 0.0
    if seen == 0 or (n_absent == 0 and seen == 1):  # one visible key: weight 1
        for h in range(heads):
            A[t, seen, h] = 1.0
            A[t, 0, h] = 1.0 if seen == 0 else 0.0
    elif c > 0:
        _softmax(s, c, seen, n_absent, log_n, heads, A, t)
    else:
        if segment != seen:
            _absent_query(s, seen, heads, E, Sp)
            segment = seen
        for h in range(heads):
            inv[h] = 1.0 / (n_absent * E[0, h] + Sp[h])
            A[t, 0, h] = n_absent * E[0, h] * inv[h]
        for y in range(1, seen + 1):
            for h in range(heads):
                A[t, y, h] = E[y, h] * inv[h]
    return segment


@numba.njit(**_JIT, inline="always")
def _node_forward(s, vw, times, L, heads, log_n, mask, moff, Db, T, has_w, A, at, E, Sp, Ad, cs, tot):  # pragma: no cover - jit
    """One pass over t < L: the attention weights ``A[t, y, h]`` (0 where a key is not
    visible), the readout weights ``at[t]`` and each key's ``cs[y, h]`` (module docstring)."""
    P = A.shape[1] - 1
    seen, n_times, segment = 0, 0, -1  # present keys visible; their timestamps; E's keys
    cs[: P + 1, :] = 0.0
    for t in range(L):
        c = 0
        if seen < P and times[seen] == t:
            n_times += 1
            while seen < P and times[seen] == t:  # an item listed twice: both visible
                seen += 1
            c = seen
        segment = _weights_at(s, t, c, seen, t + 1 - n_times, segment, P, heads, log_n, A, E, Sp, tot)
        tot[:] = 0.0
        for y in range(seen + 1):
            if moff >= 0:
                # the node's mask block is [H, D_b, T]: (h, y, t) at h D_b T + y T + t, e.g.
                # h = 1, y = 2, t = 3 with D_b = 4, T = 5 at 1 * 20 + 2 * 5 + 3 = 33
                base = moff + y * T + t
                for h in range(heads):
                    Ad[y, h] = A[t, y, h] * mask[base + h * Db * T]
            else:
                for h in range(heads):
                    Ad[y, h] = A[t, y, h]
            for h in range(heads):
                tot[h] += Ad[y, h] * vw[y, h]
        at[t] = tot.sum() if has_w else (1.0 if t == L - 1 else 0.0)
        for y in range(seen + 1):
            for h in range(heads):
                cs[y, h] += at[t] * Ad[y, h]


@numba.njit(**_JIT, inline="always")
def _sizes(offsets, lengths):  # pragma: no cover - jit
    """The largest D (present rows + 1) and L over the nodes, for the scratch arrays."""
    max_d, max_l = 1, 1
    for m in range(lengths.shape[0]):
        max_d = max(max_d, offsets[m + 1] - offsets[m] + 1)
        max_l = max(max_l, lengths[m])
    return max_d, max_l


@numba.njit(**_JIT, inline="always")
def _node_plan(absent_row, offsets, node_rows, mask, mask_off, m, rows):  # pragma: no cover - jit
    """Node m's rows into ``rows[:D]`` (absent row first); returns o (its first present row in
    node_rows), D and its mask's start (-1: no dropout)."""
    o, D = offsets[m], offsets[m + 1] - offsets[m] + 1
    rows[0] = absent_row[m]
    rows[1:D] = node_rows[o : o + D - 1]
    return o, D, (mask_off[m] if mask.shape[0] > 0 else -1)


@numba.njit(**_JIT)
def forward_kernel(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, heads, d_head, mean_heads,
                   mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, out):  # fmt: skip  # pragma: no cover - jit
    """Each node's aggregated attention output into ``out`` (module docstring).

    Shapes: qkv [R, 3 H d_head]; absent_row, lengths, mask_off, mask_d [M]; offsets [M + 1] into
    node_rows, node_times [P_b]; w_agg [d] or empty ("last" readout); mask flat (empty: no
    dropout; node m's [H, mask_d[m], mask_t] block at mask_off[m]); out [M, d], overwritten;
    for the backward: saved [a_off[M]] each node's weights A [L, D, H] from a_off[m], saved_at
    [sum L] its readout weights a_t, node after node.
    """
    if heads == DEFAULT_HEADS and d_head == DEFAULT_D_HEAD:  # constants: the per-head loops unroll
        _forward(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, DEFAULT_HEADS, DEFAULT_D_HEAD,
                 mean_heads, mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, out)  # fmt: skip
    else:
        _forward(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, heads, d_head, mean_heads,
                 mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, out)  # fmt: skip


@numba.njit(**_JIT, inline="always")
def _forward(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, heads, d_head, mean_heads,
             mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, out):  # fmt: skip  # pragma: no cover - jit
    """:func:`forward_kernel`'s work; inlined, so that constant ``heads`` and ``d_head`` reach
    every loop."""
    has_w = w_agg.shape[0] > 0
    scale = d_head**-0.5
    max_d, max_l = _sizes(offsets, lengths)
    rows = np.empty(max_d, np.int64)
    s = np.empty((max_d, max_d, heads))
    vw, cs, E, Ad = np.empty((max_d, heads)), np.empty((max_d, heads)), np.empty((max_d, heads)), np.empty((max_d, heads))
    Sp, tot = np.empty(heads), np.empty(heads)
    log_n = np.empty(max_l + 1)
    log_n[0] = -math.inf
    for i in range(1, max_l + 1):
        log_n[i] = math.log(i)
    t0 = 0
    for m in range(absent_row.shape[0]):
        L = lengths[m]
        o, D, moff = _node_plan(absent_row, offsets, node_rows, mask, mask_off, m, rows)
        _scores(qkv, rows, D, heads, d_head, scale, s)
        _value_weights(qkv, rows, D, w_agg, has_w, heads, d_head, mean_heads, vw)
        A = saved[a_off[m] : a_off[m + 1]].reshape((L, D, heads))
        _node_forward(s, vw, node_times[o : o + D - 1], L, heads, log_n, mask, moff, mask_d[m], mask_t, has_w,
                      A, saved_at[t0 : t0 + L], E, Sp, Ad, cs, tot)  # fmt: skip
        t0 += L
        _node_output(qkv, rows, D, cs.T, heads, d_head, d_head, mean_heads, out[m])  # cs is [D, heads]


@numba.njit(**_JIT, inline="always")
def _node_backward(A, at, times, L, heads, gv, vw, has_w, mask, moff, Db, T, mk, dA, ds, dvw, cs, tot):  # pragma: no cover - jit
    """One pass over t < L: into ``ds[c, y, h]`` the loss's gradient with respect to the
    scores, ``dvw[y, h]`` with respect to the readout weights and ``cs[y, h]`` the forward's
    key sums, from ``gv[y, h] = v_y . g_h`` (module docstring)."""
    P = A.shape[1] - 1
    dvw[: P + 1, :] = 0.0
    cs[: P + 1, :] = 0.0
    ds[: P + 1, : P + 1, :] = 0.0
    seen = 0
    for t in range(L):
        c = 0
        if seen < P and times[seen] == t:
            while seen < P and times[seen] == t:
                seen += 1
            c = seen
        tot[:] = 0.0
        for y in range(seen + 1):
            if moff >= 0:
                base = moff + y * T + t
                for h in range(heads):
                    mk[y, h] = mask[base + h * Db * T]
            else:
                mk[y, :] = 1.0
            for h in range(heads):
                tot[h] += A[t, y, h] * mk[y, h] * gv[y, h]
        da = tot.sum() if has_w else 0.0
        tot[:] = 0.0  # now each head's sum over y of A dA
        for y in range(seen + 1):
            for h in range(heads):
                ad = A[t, y, h] * mk[y, h]
                cs[y, h] += at[t] * ad
                dvw[y, h] += da * ad
                d = (at[t] * gv[y, h] + da * vw[y, h]) * mk[y, h]
                dA[y, h] = d
                tot[h] += A[t, y, h] * d
        for y in range(seen + 1):
            for h in range(heads):
                ds[c, y, h] += A[t, y, h] * (dA[y, h] - tot[h])


@numba.njit(**_JIT)
def backward_kernel(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, heads, d_head, mean_heads,
                    mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, grad_out, grad_qkv, grad_w):  # fmt: skip  # pragma: no cover - jit
    """The gradients of :func:`forward_kernel`'s output, ``grad_out`` [M, d], with respect to
    qkv (added into ``grad_qkv`` [R, 3 H d_head], float64) and w_agg (into ``grad_w`` [d],
    float64), from what the forward saved. Other shapes as :func:`forward_kernel`'s."""
    if heads == DEFAULT_HEADS and d_head == DEFAULT_D_HEAD:  # constants: the per-head loops unroll
        _backward(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, DEFAULT_HEADS, DEFAULT_D_HEAD,
                  mean_heads, mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, grad_out, grad_qkv, grad_w)  # fmt: skip
    else:
        _backward(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, heads, d_head, mean_heads,
                  mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, grad_out, grad_qkv, grad_w)  # fmt: skip


@numba.njit(**_JIT, inline="always")
def _backward(qkv, absent_row, offsets, node_rows, node_times, lengths, w_agg, heads, d_head, mean_heads,
              mask, mask_off, mask_d, mask_t, a_off, saved, saved_at, grad_out, grad_qkv, grad_w):  # fmt: skip  # pragma: no cover - jit
    """:func:`backward_kernel`'s work (inlined as :func:`_forward`)."""
    has_w = w_agg.shape[0] > 0
    scale = d_head**-0.5
    max_d = _sizes(offsets, lengths)[0]
    rows = np.empty(max_d, np.int64)
    ds = np.empty((max_d, max_d, heads))
    vw, cs, gv, dvw = np.empty((max_d, heads)), np.empty((max_d, heads)), np.empty((max_d, heads)), np.empty((max_d, heads))
    mk, dA, tot = np.empty((max_d, heads)), np.empty((max_d, heads)), np.empty(heads)
    g = np.empty((heads, d_head))
    HD = heads * d_head
    t0 = 0
    for m in range(absent_row.shape[0]):
        L = lengths[m]
        o, D, moff = _node_plan(absent_row, offsets, node_rows, mask, mask_off, m, rows)
        # The backward reads the saved weights A, so of the forward's per-node products it
        # recomputes only the readout weights.
        _value_weights(qkv, rows, D, w_agg, has_w, heads, d_head, mean_heads, vw)
        for h in range(heads):
            v0 = 2 * HD + h * d_head
            for i in range(d_head):
                g[h, i] = grad_out[m, i] / heads if mean_heads else grad_out[m, h * d_head + i]
            for y in range(D):
                acc = 0.0
                for i in range(d_head):
                    acc += qkv[rows[y], v0 + i] * g[h, i]
                gv[y, h] = acc
        A = saved[a_off[m] : a_off[m + 1]].reshape((L, D, heads))
        _node_backward(A, saved_at[t0 : t0 + L], node_times[o : o + D - 1], L, heads, gv, vw, has_w, mask, moff,
                       mask_d[m], mask_t, mk, dA, ds, dvw, cs, tot)  # fmt: skip
        t0 += L
        for h in range(heads):
            q0, k0, v0 = h * d_head, HD + h * d_head, 2 * HD + h * d_head
            w0 = 0 if mean_heads else h * d_head
            for y in range(D):
                ry = rows[y]
                dv = dvw[y, h] / heads if mean_heads else dvw[y, h]
                for i in range(d_head):
                    grad_qkv[ry, v0 + i] += cs[y, h] * g[h, i]
                    if has_w:
                        grad_qkv[ry, v0 + i] += dv * w_agg[w0 + i]
                        grad_w[w0 + i] += dv * qkv[ry, v0 + i]
                for c in range(D):
                    d = ds[c, y, h] * scale
                    if d != 0.0:
                        rc = rows[c]
                        for i in range(d_head):
                            grad_qkv[rc, q0 + i] += d * qkv[ry, k0 + i]
                            grad_qkv[ry, k0 + i] += d * qkv[rc, q0 + i]


def draw_mask(node_count: np.ndarray, heads: int, T: int, p: float, dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Dropout's scaled mask (0 or 1 / (1 - p)) for every node's attention weights, drawn as
    ``F.dropout`` draws it on the tensor path: one [M_b, H, D_b, T] block per bucket, buckets
    in the order of ``graph.cooccurrence``'s plan (nodes grouped by ceil(log2 P), D_b the
    group's largest P + 1, nodes in index order), so the same seed drops the same weights. The
    kernels read the blocks in that layout (no copy).

    Shapes: node_count [M] (P of each node) -> mask [sum_b M_b H D_b T], mask_off [M] (where
    node m's [H, D_b, T] block starts), mask_d [M] (its D_b), and T.
    """
    M = len(node_count)
    group = np.ceil(np.log2(np.maximum(node_count, 1))).astype(np.int64)  # [M]
    mask_off = np.zeros(M, np.int64)
    mask_d = np.zeros(M, np.int64)
    blocks, base = [], 0
    for b in np.unique(group):
        nodes = np.flatnonzero(group == b)  # [M_b]
        D = int(node_count[nodes].max()) + 1
        blocks.append((base, len(nodes), D))
        mask_off[nodes] = base + np.arange(len(nodes)) * heads * D * T
        mask_d[nodes] = D
        base += len(nodes) * heads * D * T
    noise = torch.empty(base, dtype=dtype)
    for start, n, D in blocks:  # each bucket's draw in order, as the tensor path draws it
        noise[start : start + n * heads * D * T].view(n, heads, D, T).bernoulli_(1 - p)
    return noise.div_(1 - p).numpy(), mask_off, mask_d, T


class _AttentionReadout(torch.autograd.Function):
    """:func:`forward_kernel` / :func:`backward_kernel` as an autograd function of qkv and w_agg."""

    @staticmethod
    def forward(ctx: Any, qkv: torch.Tensor, w_agg: torch.Tensor, plan: tuple, mask: tuple,
                heads: int, d_head: int, mean_heads: bool) -> torch.Tensor:  # fmt: skip
        x = qkv.detach().contiguous().numpy()
        w = w_agg.detach().to(qkv.dtype).contiguous().numpy()
        out = np.empty((len(plan[0]), d_head if mean_heads else heads * d_head), x.dtype)
        offsets, lengths = plan[1], plan[4]
        a_off = np.zeros(len(lengths) + 1, np.int64)  # each node's saved weights [L, D, H]
        np.cumsum(lengths * heads * (np.diff(offsets) + 1), out=a_off[1:])
        saved, saved_at = np.empty(a_off[-1]), np.empty(lengths.sum())
        forward_kernel(x, *plan, w, heads, d_head, mean_heads, *mask, a_off, saved, saved_at, out)
        ctx.save_for_backward(qkv, w_agg)
        ctx.plan, ctx.mask, ctx.saved, ctx.shape = plan, mask, (a_off, saved, saved_at), (heads, d_head, mean_heads)
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qkv, w_agg = ctx.saved_tensors
        x = qkv.detach().contiguous().numpy()
        w = w_agg.detach().to(qkv.dtype).contiguous().numpy()
        grad_qkv = np.zeros(x.shape)
        grad_w = np.zeros(w.shape)
        backward_kernel(x, *ctx.plan, w, *ctx.shape, *ctx.mask, *ctx.saved,
                        grad_out.detach().contiguous().numpy(), grad_qkv, grad_w)  # fmt: skip
        gq = torch.from_numpy(grad_qkv).to(qkv.dtype) if ctx.needs_input_grad[0] else None
        gw = torch.from_numpy(grad_w).to(w_agg.dtype) if ctx.needs_input_grad[1] else None
        return gq, gw, None, None, None, None, None


def aggregated(
    qkv: torch.Tensor,
    absent_row: torch.Tensor,
    node_count: torch.Tensor,
    node_rows: torch.Tensor,
    node_times: torch.Tensor,
    lengths: torch.Tensor,
    max_len: int,
    w_agg: torch.Tensor | None,
    heads: int,
    d_head: int,
    mean_heads: bool,
    dropout: float = 0.0,
) -> torch.Tensor:
    """The nodes' aggregated attention output, differentiable in qkv and w_agg; ``dropout``
    acts on the attention weights (0: none). Shapes: qkv [R, 3 H d_head]; absent_row,
    node_count, lengths [M]; node_rows, node_times [P_b]; w_agg [d] or None -> [M, d]."""
    count = node_count.numpy()
    offsets = np.zeros(len(count) + 1, np.int64)
    np.cumsum(count, out=offsets[1:])
    plan = (absent_row.numpy(), offsets, node_rows.numpy(), node_times.numpy(), lengths.numpy())
    if dropout > 0:
        mask = draw_mask(count, heads, max_len, dropout, qkv.dtype)
    else:
        empty = np.zeros(0, np.int64)
        mask = (np.zeros(0, qkv.detach().numpy().dtype), empty, empty, 0)
    w = w_agg if w_agg is not None else qkv.new_zeros(0)
    return _AttentionReadout.apply(qkv, w, plan, mask, heads, d_head, mean_heads)
