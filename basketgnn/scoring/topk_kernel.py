"""Compiled top-k kernels (numba): each customer's top k of fused scores from a few candidates
(:func:`candidate_top_k`, :func:`~basketgnn.scoring.candidates.fused_top_k`), each row's top k
of one point of the fusion's validation grid (:func:`fused_top_k_dense`,
:mod:`~basketgnn.scoring.fusion_choice`), and each row's top k of a sparse set of scores
(:func:`sparse_top_k`, the re-ranking stage's candidates), and the first k positions of each
row of dense scores in a stable descending order (:func:`stable_top_k`, the stage's order).

The first two give the items (and values) that ``metrics.top_k`` gives on the dense fused rows,
ties to the lower item, without building those rows: the best k are kept in a list ranked by
(value desc, item asc) as the candidates come
(:func:`~basketgnn.scoring.select_kernel.insert_ranked`). The third selects a row's k best
with :func:`~basketgnn.scoring.select_kernel.smallest_positions` and orders them with
:func:`~basketgnn.scoring.select_kernel.sort_by_key`. They release the GIL (``nogil``).

Shapes in this module: n customers (c in a chunk), I items, k cut-off.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options
from basketgnn.scoring.select_kernel import insert_ranked, smallest_positions, sort_by_key

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def candidate_top_k(
    shared, order, own_ptr, own_items, own_values, add_ptr, add_items, add_values, k,
):  # pragma: no cover - jit
    """Each row's top k of f (``scoring.candidates``): f_i = own value at the row's own items,
    else shared[i]; plus the addend at its items. Best first, ties to the lower item.

    ``order`` is the catalogue by (shared desc, item asc): the top k lie among the row's own and
    addend items and the first k items of ``order`` outside them.

    Shapes: shared [I] float64; order [I]; own_* CSR of n rows (items distinct, any order,
    values float64); add_* CSR of n rows (items distinct, values float64; add_ptr all zeros
    for none) -> (items [n, k] int64, values [n, k] float64).
    """
    n = len(own_ptr) - 1
    n_items = len(shared)
    out_items = np.empty((n, k), np.int64)
    out_values = np.empty((n, k))
    value = np.empty(n_items)
    in_s = np.zeros(n_items, np.bool_)
    members = np.empty(n_items, np.int64)
    best_v = np.empty(k)
    best_i = np.empty(k, np.int64)
    for u in range(n):
        n_s = 0
        for e in range(own_ptr[u], own_ptr[u + 1]):
            i = own_items[e]
            value[i] = own_values[e]
            in_s[i] = True
            members[n_s] = i
            n_s += 1
        for e in range(add_ptr[u], add_ptr[u + 1]):
            i = add_items[e]
            if in_s[i]:
                value[i] = value[i] + add_values[e]
            else:
                value[i] = shared[i] + add_values[e]
                in_s[i] = True
                members[n_s] = i
                n_s += 1
        # Keep the k best (value desc, item asc) in best_*, sorted best first.
        size = 0
        for c in range(n_s):
            i = members[c]
            size = insert_ranked(best_v, best_i, size, k, value[i], i)
        taken = 0
        for pos in range(n_items):  # the first k items of the order outside the row's own
            if taken == k:
                break
            i = order[pos]
            if in_s[i]:
                continue
            taken += 1
            size = insert_ranked(best_v, best_i, size, k, shared[i], i)
        for c in range(size):
            out_items[u, c] = best_i[c]
            out_values[u, c] = best_v[c]
        for c in range(n_s):
            in_s[members[c]] = False
    return out_items, out_values


@numba.njit(**_JIT)
def fused_top_k_dense(normalised, prefix, add_ptr, add_items, add_values, weight, k, by_item):  # pragma: no cover - jit
    """Each row's top k of f = (1 − weight) · normalised + addend (ties to the lower item):
    ``metrics.top_k`` of ``fusion.fuse_normalised``'s dense rows, without building them.

    Outside the row's addend items f is a non-decreasing function of the normalised score, so
    the row's best items outside them come first in ``prefix`` (its items by normalised score
    desc, item asc): walk it past the k-th such item while f still equals the k-th value (equal
    f, lower item); with ``by_item`` (weight 1: f = 0 outside the addend) walk the items in
    ascending order and stop after the k-th. A row whose prefix ends before that is flagged
    for the dense computation.

    Shapes: normalised [c, I] float64; prefix [c, W] int64; add_* CSR of c rows (items
    distinct) -> (items [c, k] int64, dense_needed [c] bool).
    """
    c, n_items = normalised.shape
    width = prefix.shape[1]
    rest = 1.0 - weight
    out = np.empty((c, k), np.int64)
    dense_needed = np.zeros(c, np.bool_)
    in_add = np.zeros(n_items, np.bool_)
    best_v = np.empty(k)
    best_i = np.empty(k, np.int64)
    for u in range(c):
        size = 0
        for e in range(add_ptr[u], add_ptr[u + 1]):
            i = add_items[e]
            in_add[i] = True
            size = insert_ranked(best_v, best_i, size, k, rest * normalised[u, i] + add_values[e], i)
        taken = 0
        kth = 0.0
        settled = False
        steps = n_items if by_item else width
        for j in range(steps):
            i = j if by_item else prefix[u, j]
            if in_add[i]:
                continue
            f = rest * normalised[u, i]
            if taken >= k and (by_item or f < kth):
                settled = True
                break
            size = insert_ranked(best_v, best_i, size, k, f, i)
            taken += 1
            if taken == k:
                kth = f  # the walk's values do not increase: the k-th is the smallest so far
        if not settled and (by_item or width == n_items):
            settled = True  # every item was seen
        dense_needed[u] = not settled
        for c_ in range(size):
            out[u, c_] = best_i[c_]
        for e in range(add_ptr[u], add_ptr[u + 1]):
            in_add[add_items[e]] = False
    return out, dense_needed


@numba.njit(**_JIT)
def sparse_top_k(offsets, items, neg_values, k):  # pragma: no cover - jit
    """Each row's k largest values of a CSR set whose rows hold their items in ascending order,
    best first, ties to the lower item; −1 after a row's last entry when it holds fewer than k.
    The (−value, item) pairs of a row: its k smallest positions
    (:func:`~basketgnn.scoring.select_kernel.smallest_positions`, in item order), then a
    stable sort by −value.

    Shapes: offsets [n + 1]; items [nnz] int64; neg_values [nnz] float64 (the values negated)
    -> [n, k] int64.
    """
    n = len(offsets) - 1
    out = np.full((n, k), -1, np.int64)
    longest = 0
    for u in range(n):
        longest = max(longest, offsets[u + 1] - offsets[u])
    pos = np.empty(max(longest, 1), np.int64)
    work = np.empty(max(longest, 1), np.float64)
    picked = np.empty(max(k, 1), np.int64)
    for u in range(n):
        lo, count = offsets[u], offsets[u + 1] - offsets[u]
        keys = neg_values[lo : lo + count]
        m = smallest_positions(keys, items[lo : lo + count], count, k, pos, picked, work)
        ranked = sort_by_key(keys, picked, m)
        for c in range(m):
            out[u, c] = items[lo + ranked[c]]
    return out


@numba.njit(**_JIT)
def stable_top_k(scores, k):  # pragma: no cover - jit
    """Each row's first k positions by score desc, equal scores in position order: the first k
    columns of ``np.argsort(-scores, axis=1, kind="stable")`` for scores without NaN. The best k
    are kept ranked by (score desc, position asc) as the row is read
    (:func:`~basketgnn.scoring.select_kernel.insert_ranked`).

    Shapes: scores [n, C] float32, 1 <= k <= C -> [n, k] int64.
    """
    n, c = scores.shape
    out = np.empty((n, k), np.int64)
    best_v = np.empty(k, np.float32)
    for r in range(n):
        size = 0
        for j in range(c):
            size = insert_ranked(best_v, out[r], size, k, scores[r, j], j)
    return out
