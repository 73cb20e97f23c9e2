"""The temporal attention and its readout for inference on the CPU, compiled (numba): the
same computation as ``MaskedTemporalSelfAttention.forward_aggregated`` node by node, without
the [nodes, heads, D, T] tensors.

For a node with D distinct rows (column 0 its absent row, 1..P its present rows in time order,
bought at t_1 < .. < t_P) and its user's history length L, per head h:

    s[c, y]   = (q_{row c} . k_{row y}) / sqrt(d_head)                      [D, D]
    at t < L: query column c_t = j if t = t_j else 0; keys visible: 0 (weight log n_t, the
              absent timestamps up to t; none when n_t = 0) and 1..p_t (the purchases up to t)
    A[y, t]   = softmax over the visible y of s[c_t, y] + (log n_t if y = 0)
    a_t       = sum_h sum_y A_h[y, t] (v_{h,y} . w_agg_h)    (learned readout; "last": 1 at L - 1)
    z_h       = sum_y (sum_t a_t A_h[y, t]) v_{h,y}
    out       = concat_h z_h   (mean: the heads' z averaged, a_t with w_agg / heads)

which is the tensor path's formula (``forward_aggregated``'s docstring) restricted to the real
positions t < L, where the tensor path's readout weights are non-zero. Exact up to float
rounding (sums in another order, float64 accumulators, libm's exp): the tests compare it with
the tensor path, with attention over the expanded [T, d] sequences and with the softmax at
every t.

The softmax needs no exponential per t: with e[c, y] = exp(s[c, y] − max_y' s[c, y']) taken
once per query column and key, A[y, t] = n_t^[y=0] e[c_t, y] / Σ_y' n_t^[y'=0] e[c_t, y'] (the
log n_t of the logits as a factor). A present column queries once; the absent column's norms
and readout terms at each t come from prefix sums over its keys (:func:`_closed_key_sums`,
:func:`_once_closed` for nodes bought once). Work per node is heads * (D^2 + L) multiply-adds
plus about D^2 / 2 dot products (the scores some query reads) and about heads * D^2 / 2
exponentials, all in registers and small scratch arrays reused across nodes, with no
[M, heads, D, T] tensors to pass over. The softmax at every t (heads * L * visible keys
exponentials, :func:`_key_sums`) stays as the reference and for nodes whose scores spread
wider than a shifted exponential can hold. The helpers are inlined (``inline="always"``), so
the loops compile as one function.

Nodes read their rows out of order (an absent row shared by the batch's nodes of one item and
self weight, present rows where the collate put them), and the kernel waits on those reads
more than it computes. So the rows of the node ``_AHEAD`` places on are prefetched
(:func:`~basketgnn.jit.prefetch_row`) while the current one is computed: a hint that changes
no value.

The values may be narrower than the queries and keys (d_v per head in place of d_head): a_t and
z are linear in the values, so values projected onto fixed directions beforehand give those
directions' projections of a_t and z (``MaskedTemporalSelfAttention.forward_nodes_dot``: the
readout's w_agg and the scorer's w_o, two numbers per head).

Shapes: R rows, M nodes, P_b present rows in the batch, H heads.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from basketgnn.jit import DEFAULT_D_HEAD, DEFAULT_HEADS, jit_options, prefetch_row

# NumPy's division semantics (no zero check before each division, a large share of the loop's
# time): every divisor is a softmax's sum (≥ 1, its largest term is exp(0)) or the number of heads.
_JIT = {**jit_options(__file__), "error_model": "numpy"}
_AHEAD = 4  # nodes ahead whose rows are prefetched


@numba.njit(**_JIT)
def _bought_once(
    qkv, r0, r1, p, L, w_agg, has_w, heads, d_head, d_v, mean_heads, scale, log_n, s, vw, hw, out
):  # pragma: no cover - jit
    """:func:`attention_readout` of a node with one purchase (at p; keys: absent row r0,
    present row r1), with the general path's operations in the same order: the same bits.
    One pass over t: each t's weights of every head, its readout weight a_t, then the heads'
    sums over t so far (the general path's order: a_t over the heads, then each sum over t).

    Shapes: s [heads, ≥ 2, ≥ 2], vw [heads, ≥ 2], hw [heads, 4] scratch; out [d_out] (the
    node's row)."""
    HD = heads * d_head
    for h in range(heads):
        q0, k0, v0 = h * d_head, HD + h * d_head, 2 * HD + h * d_v
        s00 = s01 = s10 = s11 = vw0 = vw1 = 0.0
        for i in range(d_head):
            s00 += qkv[r0, q0 + i] * qkv[r0, k0 + i]
        for i in range(d_head):
            s01 += qkv[r0, q0 + i] * qkv[r1, k0 + i]
        for i in range(d_head):
            s10 += qkv[r1, q0 + i] * qkv[r0, k0 + i]
        for i in range(d_head):
            s11 += qkv[r1, q0 + i] * qkv[r1, k0 + i]
        s[h, 0, 0], s[h, 0, 1], s[h, 1, 0], s[h, 1, 1] = s00 * scale, s01 * scale, s10 * scale, s11 * scale
        if has_w:
            w0 = 0 if mean_heads else h * d_v
            for i in range(d_v):
                vw0 += qkv[r0, v0 + i] * w_agg[w0 + i]
            for i in range(d_v):
                vw1 += qkv[r1, v0 + i] * w_agg[w0 + i]
            if mean_heads:
                vw0, vw1 = vw0 / heads, vw1 / heads
        vw[h, 0], vw[h, 1] = vw0, vw1
        hw[h, 2] = hw[h, 3] = 0.0  # the sums over t of a_t times each key's weight
    for t in range(L):
        total = 0.0
        for h in range(heads):
            if t < p or (t == p and p == 0):  # one visible key: weight 1
                a0, a1 = (1.0, 0.0) if t < p else (0.0, 1.0)
                total += vw[h, 0] if t < p else vw[h, 1]
            else:
                # query: the present row at t = p (absent timestamps: p), else the absent row (t)
                c = 1 if t == p else 0
                l0 = s[h, c, 0] + log_n[t]
                l1 = s[h, c, 1]
                if l1 > l0:
                    e0, e1 = math.exp(l0 - l1), 1.0
                else:
                    e0, e1 = 1.0, math.exp(l1 - l0)
                norm = 0.0
                norm += e0
                norm += e1
                a0, a1 = e0 / norm, e1 / norm
                total += a0 * vw[h, 0]
                total += a1 * vw[h, 1]
            hw[h, 0], hw[h, 1] = a0, a1
        at = total if has_w else (1.0 if t == L - 1 else 0.0)
        for h in range(heads):
            hw[h, 2] += hw[h, 0] * at
            hw[h, 3] += hw[h, 1] * at
    for k in range(out.shape[0]):
        out[k] = 0.0
    for h in range(heads):
        v0 = 2 * HD + h * d_v
        c0, c1 = hw[h, 2], hw[h, 3]
        for i in range(d_v):
            z = 0.0
            z += c0 * qkv[r0, v0 + i]
            z += c1 * qkv[r1, v0 + i]
            if mean_heads:
                out[i] += z / heads
            else:
                out[h * d_v + i] = z


@numba.njit(**_JIT, inline="always")
def _two_keys(hw, col, n, heads, has_w, inv):  # pragma: no cover - jit
    """a_t of a query over the absent key (n timestamps) and one purchase: per head the
    weights (n e_a, e_b) / (n e_a + e_b), e_a = hw[h, col], e_b = hw[h, col + 1], times the
    keys' readout weights hw[h, 4], hw[h, 5], summed over the heads (1 for the "last"
    readout); each head's reciprocal norm into ``inv``."""
    at = 0.0
    for h in range(heads):
        inv[h] = 1.0 / (n * hw[h, col] + hw[h, col + 1])
        at += (n * hw[h, col] * hw[h, 4] + hw[h, col + 1] * hw[h, 5]) * inv[h]
    return at if has_w else 1.0


@numba.njit(**_JIT, inline="always")
def _once_closed(
    qkv, r0, r1, p, L, w_agg, has_w, heads, d_head, d_v, mean_heads, scale, hw, inv, out
):  # pragma: no cover - jit
    """:func:`attention_readout` of a node with one purchase (at p < L; keys: absent row r0,
    present row r1) in closed form (:func:`_closed_key_sums` for D = 2): t < p sees the absent
    key alone; t = p queries with r1 over n = p absent timestamps and the purchase; each t > p
    queries with r0 over n = t and the purchase, weights (t e00, e01) / (t e00 + e01), e the
    exponentials shifted by the query's larger score (one exp per query and head).

    Shapes: hw [heads, 8], inv [heads] scratch; out [d_out] (the node's row)."""
    HD = heads * d_head
    for h in range(heads):
        q0, k0, v0 = h * d_head, HD + h * d_head, 2 * HD + h * d_v
        w0 = 0 if mean_heads else h * d_v
        s00 = s01 = s10 = s11 = vw0 = vw1 = 0.0
        for i in range(d_head):  # independent sums, each over i in order
            qa, qb, ka, kb = qkv[r0, q0 + i], qkv[r1, q0 + i], qkv[r0, k0 + i], qkv[r1, k0 + i]
            s00 += qa * ka
            s01 += qa * kb
            s10 += qb * ka
            s11 += qb * kb
            if has_w and d_v == d_head:
                vw0 += qkv[r0, v0 + i] * w_agg[w0 + i]
                vw1 += qkv[r1, v0 + i] * w_agg[w0 + i]
        if has_w and d_v != d_head:
            for i in range(d_v):
                vw0 += qkv[r0, v0 + i] * w_agg[w0 + i]
                vw1 += qkv[r1, v0 + i] * w_agg[w0 + i]
        if mean_heads:
            vw0, vw1 = vw0 / heads, vw1 / heads
        s00, s01, s10, s11 = s00 * scale, s01 * scale, s10 * scale, s11 * scale
        # exp(score − the query's larger score): the larger one's is exp(0) = 1
        hw[h, 0], hw[h, 1] = (1.0, math.exp(s01 - s00)) if s00 >= s01 else (math.exp(s00 - s01), 1.0)
        hw[h, 2], hw[h, 3] = (1.0, math.exp(s11 - s10)) if s10 >= s11 else (math.exp(s10 - s11), 1.0)
        hw[h, 4], hw[h, 5] = vw0, vw1
        hw[h, 6] = hw[h, 7] = 0.0  # the keys' sums of weight · a_t
    last = L - 1
    if has_w:  # t < p: the absent key alone, a_t = Σ_h vw0
        at = 0.0
        for h in range(heads):
            at += hw[h, 4]
        for _t in range(min(p, L)):  # repeated adds: the general path's rounding
            for h in range(heads):
                hw[h, 6] += at
    if p < L and (has_w or p == last):  # t = p
        at = 0.0
        if p == 0:  # the purchase alone
            for h in range(heads):
                at += hw[h, 5]
            at = at if has_w else 1.0
            for h in range(heads):
                hw[h, 7] += at
        else:
            at = _two_keys(hw, 2, p, heads, has_w, inv)
            for h in range(heads):
                r = at * inv[h]
                hw[h, 6] += p * hw[h, 2] * r
                hw[h, 7] += hw[h, 3] * r
    for h in range(heads):  # Σ over t > p of t · a_t / norm_t and of a_t / norm_t
        hw[h, 2] = hw[h, 3] = 0.0
    for t in range(p + 1 if has_w else max(p + 1, last), L):
        at = _two_keys(hw, 0, t, heads, has_w, inv)
        for h in range(heads):
            r = at * inv[h]
            hw[h, 2] += t * r
            hw[h, 3] += r
    for k in range(out.shape[0]):
        out[k] = 0.0
    for h in range(heads):
        v0 = 2 * HD + h * d_v
        c0 = hw[h, 6] + hw[h, 0] * hw[h, 2]
        c1 = hw[h, 7] + hw[h, 1] * hw[h, 3]
        for i in range(d_v):
            z = c0 * qkv[r0, v0 + i] + c1 * qkv[r1, v0 + i]
            if mean_heads:
                out[i] += z / heads
            else:
                out[h * d_v + i] = z


@numba.njit(**_JIT)
def attention_readout(
    qkv, absent_row, node_offsets, node_rows, node_times, lengths, w_agg, heads, d_head, d_v, mean_heads, out,
    once_path=True, closed_form=True, specialise=True,
):  # pragma: no cover - jit
    """Each node's aggregated attention output into ``out`` (see the module docstring).

    Shapes: qkv [R, 2 H d_head + H d_v] (q, k, v blocks, head-major within each; d_v, the
    values' width per head, is d_head for the attention's own values, or the width of values
    projected further, :func:`aggregated`); absent_row [M];
    node_offsets [M + 1] into node_rows, node_times [P_b] (each node's present rows in time
    order); lengths [M]; w_agg [H d_v] (concat) or [d_v] (mean), or empty for the "last"
    readout; out [M, H d_v] (concat) or [M, d_v] (mean), overwritten. ``closed_form``
    (default): each node's key sums from its exponentials taken once
    (:func:`_closed_key_sums`, :func:`_once_closed` for nodes bought once; equal up to float
    rounding); False: the softmax at every t
    (:func:`_key_sums`), where ``once_path`` sends nodes bought once through
    :func:`_bought_once` (the same bits as the general loop; False: the general loop).
    ``specialise`` (default): at DNNTSP's default sizes with values two wide and the learned
    readout (concat heads), the closed form's nodes bought once and the score sums run in a
    copy compiled with those sizes as constants, where the loops over heads and features unroll
    (the same operations in the same order: the same bits; False: the general copy).
    """
    M = absent_row.shape[0]
    has_w = w_agg.shape[0] > 0
    scale = d_head**-0.5
    max_d, max_l = 1, 1
    for m in range(M):
        max_d = max(max_d, node_offsets[m + 1] - node_offsets[m] + 1)
        max_l = max(max_l, lengths[m])
    rows = np.empty(max_d, np.int64)
    s = np.empty((heads, max_d, max_d), np.float64)  # s[h, query column, key column]
    vw = np.zeros((heads, max_d), np.float64)
    w = np.zeros((heads, max_d), np.float64)  # attention weights at the current t
    cs = np.zeros((heads, max_d), np.float64)  # each key's sum over t of weight · a_t
    hw = np.empty((heads, 8), np.float64)  # the two-key paths' per-head weights and sums
    e = np.empty((heads, max_d, max_d), np.float64)  # exp of the scores, shifted per query column
    pre = np.empty((heads, 2, max_d), np.float64)  # prefix sums of the absent query's weights
    g = np.empty((heads, max_d + 1), np.float64)  # per-head sums over the absent timestamps
    nrm = np.empty(heads, np.float64)  # per-head reciprocal softmax norms at one t
    log_n = np.empty(max_l + 1, np.float64)  # log of each count of absent timestamps
    log_n[0] = -math.inf
    for i in range(1, max_l + 1):
        log_n[i] = math.log(i)
    # DNNTSP's default sizes with values folded to two numbers a head (forward_nodes_dot's learned
    # readout): a copy of the two hottest paths with them as constants.
    default = specialise and heads == DEFAULT_HEADS and d_head == DEFAULT_D_HEAD and d_v == 2 and has_w
    default = default and not mean_heads
    for m in range(M):
        if m + _AHEAD < M:  # the rows of a node a few ahead, on their way while these are computed
            ahead = m + _AHEAD
            prefetch_row(qkv, absent_row[ahead])
            for j in range(node_offsets[ahead], min(node_offsets[ahead + 1], node_offsets[ahead] + 4)):
                prefetch_row(qkv, node_rows[j])
        o = node_offsets[m]
        P = node_offsets[m + 1] - o
        D = P + 1
        L = lengths[m]
        if P == 1 and closed_form:  # bought once (most nodes): two keys
            if default:  # the default sizes as constants: the loops over heads and features unroll
                _once_closed(qkv, absent_row[m], node_rows[o], node_times[o], L, w_agg, True, DEFAULT_HEADS,
                             DEFAULT_D_HEAD, 2, False, scale, hw, nrm, out[m])  # fmt: skip
            else:
                _once_closed(qkv, absent_row[m], node_rows[o], node_times[o], L, w_agg, has_w, heads, d_head, d_v,
                             mean_heads, scale, hw, nrm, out[m])  # fmt: skip
            continue
        if P == 1 and once_path:  # the same operations as the general loop, without the loops
            _bought_once(qkv, absent_row[m], node_rows[o], node_times[o], L, w_agg, has_w, heads, d_head, d_v,
                         mean_heads, scale, log_n, s, vw, hw, out[m])  # fmt: skip
            continue
        rows[0] = absent_row[m]
        for j in range(P):
            rows[j + 1] = node_rows[o + j]
        if default:
            _scores(qkv, rows, D, w_agg, True, DEFAULT_HEADS, DEFAULT_D_HEAD, 2, False, scale, s, vw)
        else:
            _scores(qkv, rows, D, w_agg, has_w, heads, d_head, d_v, mean_heads, scale, s, vw)
        if not closed_form or not _shifted_exps(s, D, heads, e):
            _key_sums(s, vw, node_times[o : o + P], L, has_w, heads, log_n, w, cs)
        else:
            _closed_key_sums(e, vw, node_times[o : o + P], L, has_w, heads, pre, g, nrm, cs)
        _node_output(qkv, rows, D, cs, heads, d_head, d_v, mean_heads, out[m])


@numba.njit(**_JIT, inline="always")
def _scores(qkv, rows, D, w_agg, has_w, heads, d_head, d_v, mean_heads, scale, s, vw):  # pragma: no cover - jit
    """Into ``s[h, c, y]`` the scaled scores of a node's D rows that its weights read: the
    absent column's (c = 0) with every key column y, a present column c's with the keys
    y <= c (it queries at its purchase, before the later keys are visible); the other entries
    are left as they are. With a learned readout, into ``vw[h, y]`` each value's readout
    weight ``v_{h,y} . w_agg_h`` (divided by the heads when they are averaged)."""
    HD = heads * d_head
    # Each sum runs over i in order from 0.0; i is the outer loop so that the sums are
    # independent chains (one dependent chain per sum stalls on the adder's latency).
    for h in range(heads):
        q0, k0, v0 = h * d_head, HD + h * d_head, 2 * HD + h * d_v
        for c in range(D):
            for y in range(D if c == 0 else c + 1):
                s[h, c, y] = 0.0
        for i in range(d_head):
            for c in range(D):
                qc = qkv[rows[c], q0 + i]
                for y in range(D if c == 0 else c + 1):
                    s[h, c, y] += qc * qkv[rows[y], k0 + i]
        for c in range(D):
            for y in range(D if c == 0 else c + 1):
                s[h, c, y] *= scale
        if has_w:
            w0 = 0 if mean_heads else h * d_v
            for y in range(D):
                vw[h, y] = 0.0
            for i in range(d_v):
                for y in range(D):
                    vw[h, y] += qkv[rows[y], v0 + i] * w_agg[w0 + i]
            if mean_heads:
                for y in range(D):
                    vw[h, y] /= heads


@numba.njit(**_JIT, inline="always")
def _step(times, t, seen, n_times):  # pragma: no cover - jit
    """The keys visible at t from those visible before: (present keys seen, distinct
    timestamps among them, the query column: the purchase at t, else 0 for the absent row).
    An item listed twice in a basket (outside the data contract: ingestion drops repeats) is
    two present rows at one timestamp, as in the tensor path: both visible, the query the later
    one, the timestamp counted once."""
    if seen < times.shape[0] and times[seen] == t:
        n_times += 1
        while seen < times.shape[0] and times[seen] == t:
            seen += 1
        return seen, n_times, seen
    return seen, n_times, 0


@numba.njit(**_JIT, inline="always")
def _key_sums(s, vw, times, L, has_w, heads, log_n, w, cs):  # pragma: no cover - jit
    """Into ``cs[h, y]`` each key's sum over t < L of its attention weight times a_t, one pass
    over t (``w`` is scratch for the weights at t). Shapes: times [P] the present rows' times."""
    P = times.shape[0]
    for h in range(heads):
        for y in range(P + 1):
            cs[h, y] = 0.0
    seen = 0  # present keys visible at t
    n_times = 0  # distinct timestamps among them
    for t in range(L):
        seen, n_times, c = _step(times, t, seen, n_times)
        n_absent = t + 1 - n_times
        total = 0.0
        if seen == 0 or (n_absent == 0 and seen == 1):  # one visible key: weight 1
            y1 = 0 if seen == 0 else 1
            for h in range(heads):
                for y in range(seen + 1):
                    w[h, y] = 0.0
                w[h, y1] = 1.0
                total += vw[h, y1]
        else:
            log_absent = log_n[n_absent]
            for h in range(heads):
                # softmax with the largest logit's exp taken as 1 (exp(0)), the rest computed
                first = 0 if n_absent > 0 else 1
                best = first
                top = s[h, c, 0] + log_absent if n_absent > 0 else s[h, c, 1]
                for y in range(first + 1, seen + 1):
                    if s[h, c, y] > top:
                        top, best = s[h, c, y], y
                norm = 0.0
                for y in range(seen + 1):
                    if y == best:
                        e = 1.0
                    elif y == 0:
                        e = math.exp(s[h, c, 0] + log_absent - top) if n_absent > 0 else 0.0
                    else:
                        e = math.exp(s[h, c, y] - top)
                    w[h, y] = e
                    norm += e
                for y in range(seen + 1):
                    w[h, y] /= norm
                    total += w[h, y] * vw[h, y]
        at = total if has_w else (1.0 if t == L - 1 else 0.0)
        # Each key's sum over t of its weight times a_t (keys not yet visible add nothing:
        # their weight is 0, and the sums never hold -0.0).
        for h in range(heads):
            for y in range(seen + 1):
                cs[h, y] += w[h, y] * at


#: Largest spread of a node's scores the closed form takes: beyond it a shifted exponential
#: could underflow to 0 (exp(-745) is 0), and the node takes the softmax at every t instead.
_MAX_SPREAD = 600.0


@numba.njit(**_JIT, inline="always")
def _shifted_exps(s, D, heads, e):  # pragma: no cover - jit
    """Into ``e[h, c, y]`` exp(s[h, c, y] − max_y' s[h, c, y']) over the keys query column c
    ever sees (c ≥ 1: 0..c, at its purchase; c = 0: all D, at absent timestamps). False when
    a node's scores spread wider than :data:`_MAX_SPREAD` (``e`` then unused)."""
    for h in range(heads):
        for c in range(D):
            last = D - 1 if c == 0 else c
            top = s[h, c, 0]
            low = top
            for y in range(1, last + 1):
                top = max(top, s[h, c, y])
                low = min(low, s[h, c, y])
            if top - low > _MAX_SPREAD:
                return False
            for y in range(last + 1):
                e[h, c, y] = math.exp(s[h, c, y] - top)
    return True


@numba.njit(**_JIT, inline="always")
def _closed_key_sums(e, vw, times, L, has_w, heads, pre, g, nrm, cs):  # pragma: no cover - jit
    """:func:`_key_sums` from the exponentials ``e`` (:func:`_shifted_exps`) instead of a
    softmax at every t. The softmax at t with query column c is, over its visible keys,
    w_y = n_t^[y=0] e[c, y] / Σ_y' n_t^[y'=0] e[c, y'] (n_t absent timestamps so far: the log n_t
    of the logits as a factor). Column c ≥ 1 queries once (at its purchase): its weights are
    summed directly. Column 0 queries at every absent t with the keys 0..p_t: its norm and
    readout terms come from prefix sums over the keys, and each key's sum over those t is
    e[0, y] times Σ_{t: p_t ≥ y} a_t / norm_t, collected per p_t and summed from the end.

    Work per node: heads · (D² + L) multiply-adds and heads · (D² + D) / 2 exponentials,
    instead of heads · L · D of each. Shapes: pre [heads, 2, ≥ D] (prefix sums of e[0, y] and
    e[0, y] · vw[y] over y ≥ 1), g [heads, ≥ D + 1], nrm [heads] (reciprocal norms) scratch; cs [heads, ≥ D]
    (output)."""
    P = times.shape[0]
    for h in range(heads):
        acc = acc_v = 0.0
        pre[h, 0, 0] = pre[h, 1, 0] = 0.0
        for y in range(1, P + 1):
            acc += e[h, 0, y]
            acc_v += e[h, 0, y] * vw[h, y]
            pre[h, 0, y], pre[h, 1, y] = acc, acc_v
        # g[h, p]: Σ a_t / norm_t over the absent t with p keys bought; g[h, P + 1]: Σ n_t a_t / norm_t
        g[h, : P + 2] = 0.0
        cs[h, : P + 1] = 0.0
    seen = n_times = 0  # present keys visible at t, distinct timestamps among them
    for t in range(L):
        seen, n_times, c = _step(times, t, seen, n_times)
        if not has_w and t != L - 1:  # the "last" readout weighs only t = L - 1
            continue
        n_absent = t + 1 - n_times
        if seen == 0 or (n_absent == 0 and seen == 1):  # one visible key: weight 1
            y1 = 0 if seen == 0 else 1
            at = 0.0
            for h in range(heads):
                at += vw[h, y1]
            at = at if has_w else 1.0
            for h in range(heads):
                cs[h, y1] += at
        elif c > 0:  # a purchase: query column c, keys 0 (when absent timestamps exist) and 1..c
            at = 0.0
            for h in range(heads):
                norm = n_absent * e[h, c, 0]
                num = norm * vw[h, 0]
                for y in range(1, c + 1):
                    norm += e[h, c, y]
                    num += e[h, c, y] * vw[h, y]
                nrm[h] = 1.0 / norm
                at += num * nrm[h]
            at = at if has_w else 1.0
            for h in range(heads):
                r = at * nrm[h]
                cs[h, 0] += n_absent * e[h, c, 0] * r
                for y in range(1, c + 1):
                    cs[h, y] += e[h, c, y] * r
        else:  # an absent timestamp: the absent row queries keys 0 and 1..seen
            at = 0.0
            for h in range(heads):
                nrm[h] = 1.0 / (n_absent * e[h, 0, 0] + pre[h, 0, seen])
                at += (n_absent * e[h, 0, 0] * vw[h, 0] + pre[h, 1, seen]) * nrm[h]
            at = at if has_w else 1.0
            for h in range(heads):
                r = at * nrm[h]
                g[h, seen] += r
                g[h, P + 1] += n_absent * r
    for h in range(heads):
        cs[h, 0] += e[h, 0, 0] * g[h, P + 1]
        tail = 0.0
        for y in range(P, 0, -1):
            tail += g[h, y]
            cs[h, y] += e[h, 0, y] * tail


@numba.njit(**_JIT, inline="always")
def _node_output(qkv, rows, D, cs, heads, d_head, d_v, mean_heads, out):  # pragma: no cover - jit
    """A node's output row ``out`` (overwritten): each head's values (d_v wide, after the
    queries' and keys' 2 heads d_head columns of ``qkv``) weighted by ``cs``, concatenated, or
    averaged over the heads."""
    HD = heads * d_head
    for k in range(out.shape[0]):
        out[k] = 0.0
    for h in range(heads):
        v0 = 2 * HD + h * d_v
        for i in range(d_v):
            acc = 0.0
            for y in range(D):
                acc += cs[h, y] * qkv[rows[y], v0 + i]
            if mean_heads:
                out[i] += acc / heads
            else:
                out[h * d_v + i] = acc


def aggregated(
    qkv: torch.Tensor,
    absent_row: torch.Tensor,
    node_count: torch.Tensor,
    node_rows: torch.Tensor,
    node_times: torch.Tensor,
    lengths: torch.Tensor,
    w_agg: torch.Tensor | None,
    heads: int,
    d_head: int,
    mean_heads: bool,
    d_v: int | None = None,
) -> torch.Tensor:
    """:func:`attention_readout` on tensors. The values may be narrower than the queries and
    keys (``d_v`` per head, default d_head): the readout and the output are linear in them,
    so values projected further (``MaskedTemporalSelfAttention.forward_nodes_dot``) give the
    same projection of the output.

    Shapes: qkv [R, 2 H d_head + H d_v]; absent_row, node_count, lengths [M]; node_rows,
    node_times [P_b]; w_agg [H d_v] (concat) or [d_v] (mean), or None -> [M, H d_v] (concat)
    or [M, d_v] (mean)."""
    M = len(absent_row)
    offsets = np.zeros(M + 1, np.int64)
    np.cumsum(node_count.numpy(), out=offsets[1:])
    x = qkv.detach().contiguous().numpy()
    w = np.zeros(0, x.dtype) if w_agg is None else w_agg.detach().to(qkv.dtype).contiguous().numpy()
    d_v = d_head if d_v is None else d_v
    out = np.empty((M, d_v if mean_heads else heads * d_v), x.dtype)
    attention_readout(
        x, absent_row.numpy(), offsets, node_rows.numpy(), node_times.numpy(), lengths.numpy(),
        w, heads, d_head, d_v, mean_heads, out,
    )  # fmt: skip
    return torch.from_numpy(out)
