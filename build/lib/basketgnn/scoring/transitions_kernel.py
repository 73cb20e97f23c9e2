"""Compiled per-customer kernel of the item-transition score (numba):
:func:`transition_kept_scores`, the score of :class:`~basketgnn.scoring.transitions.TransitionScorer`.

It computes the same float operations in the same order as the SciPy products
h = weights · X, t = h S (and ``SparseScores.top_scaled`` of t), so it gives the same bits; the
tests compare the two. A customer's work touches only its own items' rows of S, inside scratch
arrays reused from customer to customer.

Orders that fix the bits:

- the decayed history h sums each basket's weight over the baskets in time order (an item
  repeated inside a basket counts once);
- t = h S sums h_i · S_ij over the customer's items in the reverse order of their first
  appearance (baskets in time order, items ascending within a basket): the order in which
  SciPy's CSR product emits h's entries, with which the fusion's choices on validation are made.

The kernel releases the GIL (``nogil``): the recommender runs it on worker threads beside the
model.

Shapes in this module: n customers, B baskets, I items.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options
from basketgnn.scoring.select_kernel import scatter_add_listed, top_scaled_row

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def transition_kept_scores(
    instance_ptr, basket_ptr, basket_items, basket_weights, s_ptr, s_idx, s_val, explore_only, top, n_items,
):  # pragma: no cover - jit
    """Each instance's item-transition score (``scoring.transitions``): h = Σ_b w_b · x_b over
    its baskets (distinct items), t = h S (own items set to 0 with ``explore_only``), the
    ``top`` largest positive entries of t (ties to the lower item) divided by the largest.

    Shapes: instance_ptr [n + 1] (baskets of each instance); basket_ptr [B + 1], basket_items
    [*] (any order, repeats allowed); basket_weights [B]; s_* CSR [I, I] -> (offsets [n + 1],
    items [≥ nnz], values [≥ nnz] float64), a CSR of n rows.
    """
    n = len(instance_ptr) - 1
    offsets = np.zeros(n + 1, np.int64)  # rows written one after another (CSR)
    out_items = np.empty(n * top, np.int64)
    out_values = np.empty(n * top, np.float64)
    h = np.zeros(n_items)
    in_h = np.zeros(n_items, np.bool_)
    counted_in = np.full(n_items, -1, np.int64)  # the basket an item was last counted in
    first_seen = np.empty(n_items, np.int64)  # items in order of first appearance
    t = np.zeros(n_items)
    in_t = np.zeros(n_items, np.int64)
    t_items = np.empty(n_items, np.int64)
    keys = np.empty(n_items)  # −t of the positive entries kept
    kept_items = np.empty(n_items, np.int64)
    scratch = (np.empty(n_items, np.int64), np.empty(top, np.int64), np.empty(n_items), np.empty(n_items))
    keep_own = not explore_only
    for u in range(n):
        n_h = 0
        for b in range(instance_ptr[u], instance_ptr[u + 1]):
            wb = basket_weights[b]
            first = n_h
            for e in range(basket_ptr[b], basket_ptr[b + 1]):
                i = basket_items[e]
                if counted_in[i] == b:  # a repeat inside the basket
                    continue
                counted_in[i] = b
                h[i] += wb
                if not in_h[i]:
                    in_h[i] = True
                    first_seen[n_h] = i
                    n_h += 1
            if n_h - first > 1:
                first_seen[first:n_h].sort()  # in place: new items ascending within a basket
        entries = 0
        for c in range(n_h):
            entries += s_ptr[first_seen[c] + 1] - s_ptr[first_seen[c]]
        scan = entries > n_items // 4  # list t's items by a scan of the catalogue
        n_t = 0
        for c in range(n_h - 1, -1, -1):
            i = first_seen[c]
            hi = h[i]
            if hi == 0.0:
                continue
            # float32 S values widen exactly
            n_t = scatter_add_listed(t, s_idx, s_val, s_ptr[i], s_ptr[i + 1], hi, not scan, in_t, t_items, n_t)
        n_pos = 0
        if scan:  # t's entries in item order, listed, kept and cleared in one branch-free pass
            for j in range(n_items):
                v = t[j]
                keys[n_pos] = -v
                kept_items[n_pos] = j
                n_pos += (v > 0.0) & (keep_own | (h[j] == 0.0))
                t[j] = 0.0
        else:
            for c in range(n_t):
                j = t_items[c]
                v = t[j]
                if v > 0 and not (explore_only and h[j] != 0.0):
                    keys[n_pos] = -v
                    kept_items[n_pos] = j
                    n_pos += 1
            for c in range(n_t):
                j = t_items[c]
                t[j] = 0.0
                in_t[j] = 0
        at = offsets[u]
        offsets[u + 1] = at + top_scaled_row(keys, kept_items, n_pos, top, scratch, out_items[at:], out_values[at:])
        for c in range(n_h):
            i = first_seen[c]
            h[i] = 0.0
            in_h[i] = False
            counted_in[i] = -1
    return offsets, out_items, out_values
