"""Compiled primitives shared by the scoring kernels (numba): selection of the k-th smallest
value (:func:`kth_smallest`) and of the m smallest (key, id) pairs (:func:`smallest_positions`),
a row's top entries scaled by its largest (:func:`top_scaled_row`), scatter-adds
(:func:`scatter_add`, :func:`scatter_add_listed`), a ranked list of the best k
(:func:`insert_ranked`) and a stable sort by key (:func:`sort_by_key`).

Each primitive fixes the order of its float operations (documented per function), so the
kernels built on them (:mod:`~basketgnn.scoring.tifu_kernel`,
:mod:`~basketgnn.scoring.transitions_kernel`, :mod:`~basketgnn.scoring.topk_kernel`) give the
same bits as the batch NumPy / SciPy formulations of the same scores. They work in scratch
arrays the caller allocates once and reuses from customer to customer, and release the GIL
(``nogil``).

Shapes in this module: I items, P pool customers.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)
#: Keys sampled to set a selection threshold (:func:`smallest_positions`).
SAMPLE = 256


@numba.njit(**_JIT)
def kth_smallest(a, n, k):  # pragma: no cover - jit
    """The k-th smallest (0-based) of a[:n], reordering a[:n] in place: quickselect with
    median-of-three pivots and a three-way partition done as two branch-free passes (values
    below the pivot, then values equal to it: runs of equal values cost one pass; no
    mispredicted branches on the keys' order). Only the value returned is used: it does not
    depend on how a[:n] is reordered.

    Shapes: a [≥ n] float64 -> float64.
    """
    lo, hi = 0, n - 1
    while lo < hi:
        x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
        if x > y:
            x, y = y, x
        if y > z:
            y = z
        if x > y:
            y = x
        pivot = y  # the median of x, y, z
        lt = lo
        for i in range(lo, hi + 1):  # a[lo:lt] < pivot ≤ a[lt:i]
            v = a[i]
            a[i] = a[lt]
            a[lt] = v
            lt += v < pivot
        if k < lt:
            hi = lt - 1
            continue
        eq = lt
        for i in range(lt, hi + 1):  # a[lt:eq] == pivot < a[eq:i]
            v = a[i]
            a[i] = a[eq]
            a[eq] = v
            eq += v == pivot
        if k < eq:
            return pivot
        lo = eq
    return a[k]


@numba.njit(**_JIT, inline="always")
def sampled_key(keys, count, m, rank, work):  # pragma: no cover - jit
    """A threshold τ for the m smallest of keys[:count]: the rank-th smallest of a sample of
    every (count // SAMPLE)-th key. rank < 0 asks for the first guess, the sample's quantile at
    1.5 m / count: about 1.5 m keys are expected at or below it (a margin of several standard
    errors of the sampled quantile). Returns (τ, the rank used, the sample's size).

    Shapes: keys [≥ count] float64 or float32; work [≥ 2 SAMPLE] float64 (scratch)."""
    stride = max(1, count // SAMPLE)
    n_sample = count // stride
    if rank < 0:
        rank = min(n_sample - 1, (3 * m * n_sample) // (2 * count))
    for j in range(n_sample):
        work[j] = keys[j * stride]
    return kth_smallest(work, n_sample, rank), rank, n_sample


@numba.njit(**_JIT)
def smallest_positions(keys, ids, count, m, pos, out, work):  # pragma: no cover - jit
    """The m smallest (key, id) pairs among keys[:count] (ids distinct): their positions in
    out[:min(count, m)], ascending; returns min(count, m).

    Exact for any input: a threshold τ from a sample of the keys is expected to leave about
    1.5 m keys at or below it; when fewer than m are, τ is raised (at the end: every key is
    kept). The m-th smallest key of what is kept is then the cut; keys below it are taken,
    keys equal to it by ascending id.

    Shapes: keys [≥ count] float64, ids [≥ count] int64; scratch pos [≥ count] int64,
    out [≥ m] int64, work [≥ count] float64.
    """
    if m <= 0:
        return 0
    if count <= m:
        for c in range(count):
            out[c] = c
        return count
    n = -1
    if count > 2 * m:
        rank = -1
        while True:
            tau, rank, n_sample = sampled_key(keys, count, m, rank, work)
            n = 0
            for c in range(count):  # branch-free
                pos[n] = c
                n += keys[c] <= tau
            if n >= m:
                break
            if rank == n_sample - 1:
                n = -1
                break
            rank = min(n_sample - 1, 2 * rank + 1)  # too few below τ: raise it
    if n < 0:
        n = count
        for c in range(count):
            pos[c] = c
    for j in range(n):
        work[j] = keys[pos[j]]
    cut = kth_smallest(work, n, m - 1)
    # pos[:n] ascends, so compacting it keeps the positions in ascending order (no sort).
    kept = 0  # keys at or below the cut: at least m of them
    below = 0
    for j in range(n):  # branch-free; pos[kept] with kept ≤ j is no longer read
        c = pos[j]
        key = keys[c]
        pos[kept] = c
        kept += key <= cut
        below += key < cut
    if kept == m:  # every key equal to the cut is taken
        for j in range(m):
            out[j] = pos[j]
        return m
    # More keys equal to the cut than places left: of those, the need lowest ids.
    need = m - below
    n_equal = 0
    ascending = True  # ids in position order (a catalogue scan): the first ones are lowest
    last_id = 0
    for j in range(kept):
        c = pos[j]
        if keys[c] == cut:
            if n_equal > 0 and ids[c] < last_id:
                ascending = False
            last_id = ids[c]
            work[n_equal] = ids[c]  # exact: ids are below 2^53
            n_equal += 1
    if ascending:
        id_cut = work[need - 1]
    else:
        id_cut = kth_smallest(work, n_equal, need - 1)  # ids are distinct
    taken = 0
    for j in range(kept):
        c = pos[j]
        if keys[c] < cut or ids[c] <= id_cut:  # the rest of pos[:kept] equals the cut
            out[taken] = c
            taken += 1
    return m


@numba.njit(**_JIT)
def top_scaled_row(keys, items, count, top, scratch, out_items, out_values):  # pragma: no cover - jit
    """The ``top`` largest entries of (values, items[:count]), given as keys[:count] = −values
    (the callers pass positive values only, negated as they are listed: exact, negation only
    flips the sign bit; ties to the lower item; items distinct), written to out_* in ascending
    item order, each value divided by the largest one. Returns the number written.

    Shapes: keys [≥ count] float64, items [≥ count] int64; scratch: a tuple (pos [≥ count]
    int64, keep [≥ top] int64, work [≥ count] float64, value_of [I] float64); out_items [≥ top]
    int64, out_values [≥ top] float64.
    """
    pos, keep, work, value_of = scratch
    kept = smallest_positions(keys, items, count, top, pos, keep, work)
    if kept == 0:
        return 0
    low = keys[keep[0]]
    ascending = True  # positions ascend (keep is sorted); so do items when listed by a scan
    for c in range(kept):
        j = keep[c]
        if keys[j] < low:
            low = keys[j]
        if c > 0 and items[j] < items[keep[c - 1]]:
            ascending = False
    peak = -low  # the largest value
    if ascending:
        for c in range(kept):
            out_items[c] = items[keep[c]]
            out_values[c] = -keys[keep[c]] / peak
    else:
        for c in range(kept):
            value_of[items[keep[c]]] = -keys[keep[c]]
            out_items[c] = items[keep[c]]
        out_items[:kept].sort()
        for c in range(kept):
            out_values[c] = value_of[out_items[c]] / peak
    return kept


@numba.njit(**_JIT)
def scatter_add(acc, idx, val, lo, hi, scale):  # pragma: no cover - jit
    """acc[idx[e]] += scale · val[e] for e in lo..hi-1, in that order (indices ≥ 0).

    Unrolled by four, indices as unsigned (no wraparound of negative indices): the same
    operations in the same order, each a load after the previous store, cheaper to issue.

    Shapes: acc [I]; idx, val [nnz]."""
    e = lo
    while e + 4 <= hi:
        acc[np.uint64(idx[e])] += scale * val[e]
        acc[np.uint64(idx[e + 1])] += scale * val[e + 1]
        acc[np.uint64(idx[e + 2])] += scale * val[e + 2]
        acc[np.uint64(idx[e + 3])] += scale * val[e + 3]
        e += 4
    while e < hi:
        acc[np.uint64(idx[e])] += scale * val[e]
        e += 1


@numba.njit(**_JIT)
def scatter_add_listed(acc, idx, val, lo, hi, scale, track, listed_flag, listed, n):  # pragma: no cover - jit
    """acc[idx[e]] += scale · val[e] for e in lo..hi-1, in that order; with ``track``, each
    index not yet flagged is appended to listed[n:] and flagged (branch-free). Returns n.

    Shapes: acc [I]; idx, val [nnz]; listed_flag [I] int64 (0/1); listed [I] int64.
    """
    if track:
        for e in range(lo, hi):
            j = np.uint64(idx[e])
            acc[j] += scale * val[e]
            listed[n] = j
            n += 1 - listed_flag[j]
            listed_flag[j] = 1
    else:
        scatter_add(acc, idx, val, lo, hi, scale)
    return n


@numba.njit(**_JIT)
def insert_ranked(best_v, best_i, size, k, v, i):  # pragma: no cover - jit
    """Insert (v, i) into the sorted list best_* (value desc, item asc) of at most k entries;
    returns the new size."""
    if size == k:
        last_v, last_i = best_v[k - 1], best_i[k - 1]
        if v < last_v or (v == last_v and i > last_i):
            return size
        j = k - 1
    else:
        j = size
        size += 1
    while j > 0 and (best_v[j - 1] < v or (best_v[j - 1] == v and best_i[j - 1] > i)):
        best_v[j] = best_v[j - 1]
        best_i[j] = best_i[j - 1]
        j -= 1
    best_v[j] = v
    best_i[j] = i
    return size


@numba.njit(**_JIT)
def sort_by_key(keys, rows, size):  # pragma: no cover - jit
    """rows[:size] (ascending) ordered by keys[row], stably (equal keys keep ascending rows): a
    bottom-up merge sort (np.argsort's stable kind compiles slowly).

    Shapes: keys [P] float64, rows [≥ size] int64 -> [size] int64."""
    a = rows[:size].copy()
    b = np.empty(size, np.int64)
    width = 1
    while width < size:
        for lo in range(0, size, 2 * width):
            mid, hi = min(lo + width, size), min(lo + 2 * width, size)
            i, j = lo, mid
            for t in range(lo, hi):
                if i < mid and (j >= hi or keys[a[i]] <= keys[a[j]]):
                    b[t] = a[i]
                    i += 1
                else:
                    b[t] = a[j]
                    j += 1
        a, b = b, a
        width *= 2
    return a
