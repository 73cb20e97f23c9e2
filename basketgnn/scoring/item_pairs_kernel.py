"""The item pairs' compiled passes (numba): the table of each item's largest pair counts
(:func:`top_pairs`), and the columns (:func:`pair_columns`).

:func:`pair_columns` gives each customer's candidates a place in two small sums, then walks
each distinct history item i's kept pairs: for a partner j that is a candidate, it adds
C'_ij / sqrt(max(d'_i, 1)) to j's sum and keeps j's maximum of it, and at the end divides both
by sqrt(max(d'_j, 1)). That is :mod:`~basketgnn.scoring.item_pairs`' cosine, summed in float64
in another order (the tests hold it to the dense formula within float32 rounding); C' and d' are
the counts with the customer's own pool items left out. A partner that is not a candidate adds
to a spare place instead, so the loop has no branch. The item-indexed scratch is reset entry by
entry after each customer, so the work is the customer's history items times their kept pairs,
plus its candidates.

:func:`top_pairs` counts item i's pairs by walking its buyers' item lists into a count per item,
finds the count at the ``top``-th place from a histogram of the counts (they are at most i's
buyers), and keeps every partner above it and the lowest items at it: no sort over the
partners, so the work is the product's Σ over customers of their items squared plus the
partners counted.

Both passes release the GIL (``nogil``).

Shapes in this module: n instances, C candidates, I items, B history baskets, D pool customers,
T kept pairs per item.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)


#: Places in the sums that take the non-candidates' additions, an item's by its index: spread
#: over several, consecutive additions do not wait on each other.
SPILL = 16


@numba.njit(**_JIT)
def pair_columns(
    pair_offsets, partners, counts, degree, own_offsets, own_items, codes,
    instance_baskets, basket_offsets, basket_items, items, column, out,
):  # pragma: no cover - jit
    """Write ``item_pairs_sum`` and ``item_pairs_max`` into out[:, :, column] and [column + 1].

    Args:
        pair_offsets, partners, counts: each item's kept pairs as CSR, [I + 1], [P] uint32
            (unsigned: an index without a negative-index check), [P].
        degree: each item's pool customers, [I].
        own_offsets, own_items: each pool customer's visible items as CSR, [D + 1], [entries].
        codes: each instance's pool customer, -1 for a customer outside the pool, [n].
        instance_baskets, basket_offsets, basket_items: the instances' history baskets, as in
            :func:`~basketgnn.scoring.rerank_features_kernel.candidate_columns`.
        items: the candidates, [n, C].
        out: [n, C, F] float32, F >= column + 2.
    """
    n, c = items.shape
    n_items = len(degree)
    own = np.zeros(n_items, np.int32)  # 1 for the customer's own pool items
    seen = np.full(n_items, -1, np.int64)  # the last instance whose history held the item
    # An item's place in total / largest: a candidate's own, else one of the SPILL after them.
    spill = (c + np.arange(n_items) % SPILL).astype(np.uint32)
    place = spill.copy()
    total = np.zeros(c + SPILL, np.float64)
    largest = np.zeros(c + SPILL, np.float64)
    for r in range(n):
        code = codes[r]
        if code >= 0:
            for e in range(own_offsets[code], own_offsets[code + 1]):
                own[own_items[e]] = 1
        for k in range(c):
            place[items[r, k]] = np.uint32(k)
            total[k] = 0.0
            largest[k] = 0.0
        for e in range(basket_offsets[instance_baskets[r]], basket_offsets[instance_baskets[r + 1]]):
            i = basket_items[e]
            if seen[i] == r:
                continue
            seen[i] = r
            own_i = own[i]
            weight = 1.0 / math.sqrt(max(degree[i] - own_i, 1))
            if own_i:
                for f in range(pair_offsets[i], pair_offsets[i + 1]):
                    j = partners[f]
                    k = place[j]
                    v = (counts[f] - own[j]) * weight
                    total[k] += v
                    largest[k] = max(largest[k], v)
            else:
                for f in range(pair_offsets[i], pair_offsets[i + 1]):
                    k = place[partners[f]]
                    v = counts[f] * weight
                    total[k] += v
                    largest[k] = max(largest[k], v)
        for k in range(c):
            j = items[r, k]
            s = place[j]  # a candidate listed twice adds to its last place
            scale = 1.0 / math.sqrt(max(degree[j] - own[j], 1))
            out[r, k, column] = math.log1p(total[s] * scale)
            out[r, k, column + 1] = largest[s] * scale
        for k in range(c):
            place[items[r, k]] = spill[items[r, k]]
        if code >= 0:
            for e in range(own_offsets[code], own_offsets[code + 1]):
                own[own_items[e]] = 0


@numba.njit(**_JIT)
def top_pairs(item_offsets, item_customers, customer_offsets, customer_items, partners, counts, kept):  # pragma: no cover - jit
    """Fill each item's row of partners / counts [I, T] with its T largest pair counts C_ij
    (j != i), larger count first, then the lower j, and kept [I] with how many it has.

    Args:
        item_offsets, item_customers: each item's buyers as CSR, [I + 1], [entries].
        customer_offsets, customer_items: each buyer's items as CSR, [D + 1], [entries].
    """
    n_items = len(item_offsets) - 1
    top = partners.shape[1]
    max_degree = 0
    for i in range(n_items):
        max_degree = max(max_degree, item_offsets[i + 1] - item_offsets[i])
    count = np.zeros(n_items, np.int32)
    touched = np.empty(n_items, np.int64)
    hist = np.zeros(max_degree + 1, np.int64)  # partners per count
    ties = np.empty(n_items, np.int64)
    key = np.empty(top, np.int64)
    for i in range(n_items):
        n_touched = 0
        for e in range(item_offsets[i], item_offsets[i + 1]):
            u = item_customers[e]
            for f in range(customer_offsets[u], customer_offsets[u + 1]):
                j = customer_items[f]
                if count[j] == 0:
                    touched[n_touched] = j
                    n_touched += 1
                count[j] += 1
        degree = item_offsets[i + 1] - item_offsets[i]
        for s in range(n_touched):
            if touched[s] != i:
                hist[count[touched[s]]] += 1
        # Counts above ``threshold`` are kept whole; at it, the lowest items fill the row.
        threshold, above = 0, 0
        for c in range(degree, 0, -1):
            if above + hist[c] >= top:
                threshold = c
                break
            above += hist[c]
        n_kept, n_ties = 0, 0
        for s in range(n_touched):
            j = touched[s]
            if j == i:
                continue
            if count[j] > threshold:
                partners[i, n_kept] = j
                counts[i, n_kept] = count[j]
                n_kept += 1
            elif count[j] == threshold:
                ties[n_ties] = j
                n_ties += 1
        if n_ties:
            tied = np.sort(ties[:n_ties])
            for s in range(min(n_ties, top - n_kept)):
                partners[i, n_kept] = tied[s]
                counts[i, n_kept] = threshold
                n_kept += 1
        for s in range(n_kept):
            key[s] = np.int64(counts[i, s]) * n_items + (n_items - 1 - partners[i, s])
        order = np.argsort(-key[:n_kept])
        row_partners = partners[i, :n_kept].copy()
        row_counts = counts[i, :n_kept].copy()
        for s in range(n_kept):
            partners[i, s] = row_partners[order[s]]
            counts[i, s] = row_counts[order[s]]
        kept[i] = n_kept
        for s in range(n_touched):
            count[touched[s]] = 0
        for c in range(degree + 1):
            hist[c] = 0
