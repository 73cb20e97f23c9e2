"""Compiled per-customer kernels of TIFU-KNN (numba): the decayed customer vectors
(:func:`decayed_rows`), the neighbour search with the fused kept scores of each α
(:func:`tifu_kept_scores`, the fusion's TIFU score; :func:`tifu_neighbours`, the neighbours it
averages) and the ranking of every (k, α) of a tuning
grid (:func:`tifu_ranked`, :func:`~basketgnn.scoring.tifu.tune_tifu`).

They compute the same float operations on the same values in the same order as the batch
NumPy / SciPy formulation in :mod:`basketgnn.scoring.tifu` (``NeighbourIndex.nearest`` and
``mean``, ``combine``, ``SparseScores.top_scaled``), so they give the same bits; the tests
compare the two. The one exception is asked for: :func:`tifu_kept_scores` given a base of
common pool rows takes each neighbour mean as the base's sum corrected by the rows that differ
(:func:`_mean_from_base`), the same neighbours and candidates with the mean equal up to float64
rounding, at a fraction of the pool entries read where most queries share most neighbours. A customer's work touches only its own entries (its items' pool rows, its
neighbours' items, its candidates) inside scratch arrays reused from customer to customer: no
[chunk, P] or [chunk, I] block and no full-width top-k. The items most pool rows hold are the
exception in the distances: a dense column over the pool each (:func:`_distances`). Each pool
row (and inverted list) a query reads starts at a cache line of its own, so the kernels
prefetch the start of the row two rows on (:func:`_prefetch_row_start`): a hint that changes no
value.

Orders that fix the bits:

- a dot product q · v_p sums over the query's items in ascending item order;
- a neighbour mean sums w · v_n over the neighbours in ascending pool row order, with
  w = 1 / (number of neighbours found);
- TIFU's fused value is float32(α · own + (1 − α) · mean);
- a customer vector sums its baskets' weights per item in entry order (a repeated entry
  counts again).

The kernels release the GIL (``nogil``): the recommender runs them on worker threads beside the
model. They run one customer after another; nothing is parallel inside them.

Shapes in this module: n customers, P pool customers, I items.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options, prefetch
from basketgnn.scoring.select_kernel import (
    SAMPLE,
    insert_ranked,
    sampled_key,
    scatter_add,
    scatter_add_listed,
    smallest_positions,
    sort_by_key,
    top_scaled_row,
)

_JIT = jit_options(__file__)


@numba.njit(**_JIT, inline="always")
def _prefetch_row_start(p, ptr, idx, val):  # pragma: no cover - jit
    """:func:`~basketgnn.jit.prefetch` of the first entries of row p of a CSR (its later ones
    follow in order, where the CPU's own prefetching reaches them)."""
    e = ptr[p]
    if e < len(idx):
        prefetch(idx, e)
        prefetch(val, e)


@numba.njit(**_JIT)
def _distances(
    u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, slot, dense, dots, dist,
):  # pragma: no cover - jit
    """dist[p] = ||v_p||² − 2 q_u · v_p for every pool row p (infinite for u's ``same_rows``),
    each dot product summed over u's items in ascending order. ``dots`` is zero before and after.

    An item with a dense column (``slot[i]`` ≥ 0: most pool rows hold it) adds q · dense[slot[i]]
    to every row, a contiguous pass in place of the scatter over its rows: the rows that lack it
    add q · 0.0 = +0.0, which leaves a sum of non-negative terms as it is, so the bits are the
    scatter's.

    Shapes: slot [I] int64; dense [*, P] float64; dots, dist [P] float64 (scratch / output)."""
    for e in range(own_ptr[u], own_ptr[u + 1]):
        if e + 2 < own_ptr[u + 1]:
            _prefetch_row_start(own_idx[e + 2], inv_ptr, inv_rows, inv_val)
        q = own_val[e]
        i = own_idx[e]
        j = slot[i]
        if j >= 0:
            column = dense[j]
            for p in range(len(dots)):
                dots[p] += q * column[p]
        else:
            scatter_add(dots, inv_rows, inv_val, inv_ptr[i], inv_ptr[i + 1], q)
    for p in range(len(sq_norms)):
        dist[p] = sq_norms[p] - 2.0 * dots[p]
        dots[p] = 0.0
    for e in range(same_ptr[u], same_ptr[u + 1]):
        dist[same_rows[e]] = np.inf


@numba.njit(**_JIT)
def _nearest(dist, rows, n_pool, k_eff, pos, nearest, work):  # pragma: no cover - jit
    """The k smallest (distance, row) with a finite distance, into ``nearest`` in ascending row
    order; returns how many."""
    size = smallest_positions(dist, rows, n_pool, k_eff, pos, nearest, work)
    n_found = 0
    for j in range(size):
        if dist[nearest[j]] < np.inf:
            nearest[n_found] = nearest[j]
            n_found += 1
    return n_found


@numba.njit(**_JIT)
def _neighbour_sum(u, neighbours, w, own_ptr, pool_ptr, pool_idx, pool_val, mean, seen, cand):  # pragma: no cover - jit
    """mean += Σ w · v_p over ``neighbours`` (ascending rows). When u's and the neighbours'
    entries are few, the neighbours' items are listed in cand[:n] as they come (flagged in
    ``seen``) and n is returned; else -1: the candidates are to be listed by a scan of the
    catalogue (``seen`` is not touched).

    Shapes: neighbours [k]; mean [I] float64; seen [I] int64 (0/1); cand [I] int64."""
    entries = own_ptr[u + 1] - own_ptr[u]
    for p in neighbours:
        entries += pool_ptr[p + 1] - pool_ptr[p]
    scan = entries > len(mean) // 4
    n_cand = 0
    for j in range(len(neighbours)):
        if j + 2 < len(neighbours):
            _prefetch_row_start(neighbours[j + 2], pool_ptr, pool_idx, pool_val)
        p = neighbours[j]
        n_cand = scatter_add_listed(mean, pool_idx, pool_val, pool_ptr[p], pool_ptr[p + 1], w, not scan, seen, cand, n_cand)
    return -1 if scan else n_cand


@numba.njit(**_JIT)
def _list_own(u, own_ptr, own_idx, seen, cand, n_cand):  # pragma: no cover - jit
    """u's own items appended to cand[n_cand:] unless already flagged in ``seen`` (then
    flagged; branch-free). Returns the new n_cand."""
    for e in range(own_ptr[u], own_ptr[u + 1]):
        i = own_idx[e]
        cand[n_cand] = i
        n_cand += 1 - seen[i]
        seen[i] = 1
    return n_cand


@numba.njit(**_JIT)
def _neighbour_mean(u, neighbours, w, own_ptr, own_idx, own, pool_ptr, pool_idx, pool_val, mean, seen, cand):  # pragma: no cover - jit
    """mean += Σ w · v_p over ``neighbours`` (ascending rows), and the candidate items (the
    neighbours' and u's own, ``own`` already set) in cand[:n], listed as they come, or by a
    scan of the catalogue when they are many. Returns n.

    Shapes: neighbours [k]; own, mean [I] float64; seen [I] int64 (0/1); cand [I] int64."""
    n_cand = _neighbour_sum(u, neighbours, w, own_ptr, pool_ptr, pool_idx, pool_val, mean, seen, cand)
    if n_cand < 0:
        n_cand = 0
        for i in range(len(mean)):
            cand[n_cand] = i
            n_cand += (mean[i] != 0.0) | (own[i] != 0.0)  # both are > 0 where set
    else:
        n_cand = _list_own(u, own_ptr, own_idx, seen, cand, n_cand)
    return n_cand


@numba.njit(**_JIT)
def _fused_positive(cand, n_cand, own, mean, alpha, fused, fused_items):  # pragma: no cover - jit
    """TIFU's value float32(α · own + (1 − α) · mean) of each candidate item, the positive ones
    written to fused (float64, exact) and fused_items in candidate order. Returns their number.

    Shapes: cand [≥ n_cand]; own, mean [I]; fused, fused_items [≥ n_cand] (outputs)."""
    rest = 1.0 - alpha
    n_pos = 0
    for c in range(n_cand):
        i = cand[c]
        v = np.float32(alpha * own[i] + rest * mean[i])
        if v > 0:
            fused[n_pos] = v
            fused_items[n_pos] = i
            n_pos += 1
    return n_pos


@numba.njit(**_JIT)
def _fused_scan(own, mean, alpha, clear, top, negated, keys, items, work):  # pragma: no cover - jit
    """The negated TIFU values −float32(α · own + (1 − α) · mean) (float64, exact) in keys,
    and their items in item order, of the items that may be among the ``top`` largest positive
    values; with ``clear``, own and mean are set to 0 on the way. Returns their number.

    The negated values go to ``negated`` (float32) in one pass. Where more than 2 · top are
    positive, a threshold τ from a sample of them
    (:func:`~basketgnn.scoring.select_kernel.sampled_key`, raised while fewer than ``top`` are
    at or below it, as ``smallest_positions`` does) lists only those at or below τ: every item
    left out has a smaller value than ``top`` listed ones, so the top entries and their cut are
    those of the full list. When no sampled τ below zero reaches ``top``, every positive item
    is listed.

    Shapes: own, mean [I]; negated [I] float32, keys, items [I], work [≥ 2 SAMPLE] (scratch)."""
    rest = 1.0 - alpha
    n_items = len(mean)
    n_pos = 0
    for i in range(n_items):
        v = np.float32(alpha * own[i] + rest * mean[i])
        negated[i] = -v
        n_pos += v > 0
    if clear:
        own[:] = 0.0
        mean[:] = 0.0
    rank = -1
    while n_pos > 2 * top:
        tau, rank, n_sample = sampled_key(negated, n_items, top, rank, work)
        if tau >= 0.0:  # a higher rank would not lower it
            break
        n = _listed(negated, tau, True, keys, items)
        if n >= top:
            return n
        if rank == n_sample - 1:
            break
        rank = min(n_sample - 1, 2 * rank + 1)  # too few at or below τ: raise it
    return _listed(negated, 0.0, False, keys, items)


@numba.njit(**_JIT, inline="always")
def _own_listed(u, own_ptr, own_idx, own, mean, keys, items):  # pragma: no cover - jit
    """keys = −float32(1 · own + 0 · mean) (float64, exact) and items of u's own items whose
    value is positive, in item order: at α = 1 every other item's value is 0, so the list's top
    entries are those of :func:`_fused_scan`'s scan over the catalogue. Returns their number.

    Shapes: own_* CSR (items ascending); own, mean [I] float64; keys, items [≥ u's items]."""
    n = 0
    for e in range(own_ptr[u], own_ptr[u + 1]):
        i = own_idx[e]
        v = np.float32(1.0 * own[i] + 0.0 * mean[i])
        keys[n] = -np.float64(v)
        items[n] = i
        n += v > 0
    return n


@numba.njit(**_JIT, inline="always")
def _listed(negated, tau, inclusive, keys, items):  # pragma: no cover - jit
    """keys = float64(negated) and items of the negated values ≤ τ (``inclusive``) or < τ, in
    item order (branch-free). Returns their number."""
    n = 0
    for i in range(len(negated)):
        key = np.float64(negated[i])
        keys[n] = key
        items[n] = i
        n += (key <= tau) if inclusive else (key < tau)
    return n


@numba.njit(**_JIT)
def tifu_ranked(
    own_ptr, own_idx, own_val, same_ptr, same_rows, pool_ptr, pool_idx, pool_val,
    inv_ptr, inv_rows, inv_val, sq_norms, slot, dense, ks, alphas, cut, n_items,
):  # pragma: no cover - jit
    """TIFU-KNN's ranking of each query for every (k, α) of a tuning grid: the first ``cut``
    items of float32(α · q_u + (1 − α) · m_u) by value desc, item asc, where m_u is the mean
    of u's k nearest pool rows (nearest first, ties to the lower row; infinite distances are
    not neighbours), summed over them in ascending row order. ``metrics.top_k`` of
    ``tifu.combine(own, NeighbourIndex.mean(nearest[:, :k]), α)``, bit for bit, for vectors
    without negative entries (items outside the candidates score 0 and fill the ranking's end,
    lowest first).

    Shapes: as :func:`tifu_kept_scores`; ks [K] ascending, alphas [A] -> [K, A, n, cut] int64.
    """
    n = len(own_ptr) - 1
    n_pool = len(sq_norms)
    out = np.empty((len(ks), len(alphas), n, cut), np.int64)
    dots = np.zeros(n_pool)
    dist = np.empty(n_pool)
    k_max = min(ks[-1], n_pool)
    rows = np.arange(n_pool)
    nearest = np.empty(max(k_max, 1), np.int64)
    pos = np.empty(n_pool, np.int64)
    work = np.empty(n_pool)
    mean = np.zeros(n_items)
    own = np.zeros(n_items)
    positive = np.zeros(n_items, np.bool_)
    seen = np.zeros(n_items, np.int64)
    cand = np.empty(n_items, np.int64)
    fused = np.empty(n_items)
    fused_items = np.empty(n_items, np.int64)
    best_v = np.empty(cut)
    best_i = np.empty(cut, np.int64)
    for u in range(n):
        _distances(u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, slot, dense,
                   dots, dist)  # fmt: skip
        size = smallest_positions(dist, rows, n_pool, k_max, pos, nearest, work)
        by_distance = sort_by_key(dist, nearest, size)  # nearest first, rows ascending among equals
        for e in range(own_ptr[u], own_ptr[u + 1]):
            own[own_idx[e]] = own_val[e]
        for kk in range(len(ks)):
            first = by_distance[: min(ks[kk], size)]
            n_found = 0
            for j in range(len(first)):
                n_found += dist[first[j]] < np.inf  # infinite ones sort last
            neighbours = np.sort(first[:n_found])
            w = 1.0 / max(n_found, 1)
            n_cand = _neighbour_mean(u, neighbours, w, own_ptr, own_idx, own, pool_ptr, pool_idx, pool_val, mean, seen, cand)
            for a in range(len(alphas)):
                n_pos = _fused_positive(cand, n_cand, own, mean, alphas[a], fused, fused_items)
                size_best = 0
                for c in range(n_pos):
                    positive[fused_items[c]] = True
                    size_best = insert_ranked(best_v, best_i, size_best, cut, fused[c], fused_items[c])
                for c in range(size_best):
                    out[kk, a, u, c] = best_i[c]
                i = 0
                for c in range(size_best, cut):  # the rest score 0: lower items first
                    while positive[i]:
                        i += 1
                    out[kk, a, u, c] = i
                    i += 1
                for c in range(n_cand):
                    positive[cand[c]] = False
            for c in range(n_cand):
                i = cand[c]
                seen[i] = 0
                mean[i] = 0.0
        for e in range(own_ptr[u], own_ptr[u + 1]):
            own[own_idx[e]] = 0.0
    return out


@numba.njit(**_JIT)
def _merge_difference(a, b, only_a, only_b):  # pragma: no cover - jit
    """The entries of ascending a not in ascending b into only_a, and of b not in a into
    only_b (both ascending); returns their numbers."""
    i = j = n_a = n_b = 0
    while i < len(a) or j < len(b):
        if j == len(b) or (i < len(a) and a[i] < b[j]):
            only_a[n_a] = a[i]
            n_a += 1
            i += 1
        elif i == len(a) or b[j] < a[i]:
            only_b[n_b] = b[j]
            n_b += 1
            j += 1
        else:
            i += 1
            j += 1
    return n_a, n_b


@numba.njit(**_JIT)
def _entries(rows, n, pool_ptr):  # pragma: no cover - jit
    """The pool entries of rows[:n]."""
    total = 0
    for j in range(n):
        total += pool_ptr[rows[j] + 1] - pool_ptr[rows[j]]
    return total


@numba.njit(**_JIT)
def _mean_from_base(neighbours, w, base, pool_ptr, pool_idx, pool_val, mean, count, only_n, only_b):  # pragma: no cover - jit
    """mean = w · Σ v_p over ``neighbours`` as the base rows' sum (base_sum, base_count: how
    many base rows hold each item) less the base rows that are not neighbours plus the
    neighbours that are not base rows, when that touches fewer pool entries than summing the
    neighbours; items no neighbour holds get exactly 0 (their count). Returns False (nothing
    written) when summing the neighbours is cheaper.

    Shapes: base (rows [B] ascending, sum [I] float64, count [I] int32); mean [I] float64;
    count [I] int32 scratch; only_n [≥ k], only_b [≥ B] int64 scratch."""
    base_rows, base_sum, base_count = base
    n_n, n_b = _merge_difference(neighbours, base_rows, only_n, only_b)
    if _entries(only_n, n_n, pool_ptr) + _entries(only_b, n_b, pool_ptr) >= _entries(neighbours, len(neighbours), pool_ptr):
        return False
    mean[:] = base_sum
    count[:] = base_count
    for j in range(n_b):
        if j + 2 < n_b:
            _prefetch_row_start(only_b[j + 2], pool_ptr, pool_idx, pool_val)
        p = only_b[j]
        for e in range(pool_ptr[p], pool_ptr[p + 1]):
            i = np.uint64(pool_idx[e])
            mean[i] -= pool_val[e]
            count[i] -= 1
    for j in range(n_n):
        if j + 2 < n_n:
            _prefetch_row_start(only_n[j + 2], pool_ptr, pool_idx, pool_val)
        p = only_n[j]
        for e in range(pool_ptr[p], pool_ptr[p + 1]):
            i = np.uint64(pool_idx[e])
            mean[i] += pool_val[e]
            count[i] += 1
    for i in range(len(mean)):
        mean[i] = w * mean[i] if count[i] > 0 else 0.0
    return True


@numba.njit(**_JIT)
def tifu_kept_scores(
    own_ptr, own_idx, own_val, same_ptr, same_rows, pool_ptr, pool_idx, pool_val,
    inv_ptr, inv_rows, inv_val, sq_norms, slot, dense, k, alphas, top, n_items, base,
):  # pragma: no cover - jit
    """TIFU-KNN's kept scores of each query, for each α (``scoring.tifu``, float64 search).

    For query u: distances ||v_p||² − 2 q_u · v_p to every pool row p (rows in ``same_rows``
    of u: infinite), the k smallest (ties to the lower row; infinite ones are not neighbours),
    the neighbours' mean m_u, and for each α the ``top`` largest positive entries of
    float32(α · q_u + (1 − α) · m_u) (ties to the lower item), divided by the largest.

    ``base``: (rows, their sum, per-item counts) of a fixed set of pool rows, most queries'
    neighbours mostly (:meth:`~basketgnn.scoring.tifu.NeighbourIndex.common_rows`). When it
    has rows, m_u is computed from it wherever fewer entries are touched
    (:func:`_mean_from_base`): the same neighbours and candidates, m_u equal up to float64
    rounding (sums in another order). With no rows, m_u sums over the neighbours in ascending
    row order: the batch formulation's bits.

    Shapes: own_* CSR [n, I] (items ascending); same_ptr [n + 1], same_rows [*]; pool_* CSR
    [P, I] (items ascending); inv_* its transpose [I, P] (rows ascending); sq_norms [P];
    slot [I], dense [*, P]: the dense columns of the items most rows hold (:func:`_distances`);
    alphas [A]; base ([B] int64, [I] float64, [I] int32) -> (offsets [A, n + 1], items
    [A, ≥ nnz] int64, values [A, ≥ nnz] float64): row u of α number a is
    items[a, offsets[a, u]:offsets[a, u + 1]].
    """
    n = len(own_ptr) - 1
    n_pool = len(sq_norms)
    n_alpha = len(alphas)
    # Rows written one after another (CSR), in buffers sized for ``top`` entries a row.
    offsets = np.zeros((n_alpha, n + 1), np.int64)
    out_items = np.empty((n_alpha, n * top), np.int64)
    out_values = np.empty((n_alpha, n * top), np.float64)
    dots = np.zeros(n_pool)
    dist = np.empty(n_pool)
    k_eff = min(k, n_pool)
    rows = np.arange(n_pool)
    nearest = np.empty(max(k_eff, 1), np.int64)
    pos = np.empty(n_pool, np.int64)
    scratch = (np.empty(n_items, np.int64), np.empty(top, np.int64), np.empty(n_items), np.empty(n_items))
    work = np.empty(n_pool)
    mean = np.zeros(n_items)
    own = np.zeros(n_items)
    seen = np.zeros(n_items, np.int64)
    cand = np.empty(n_items, np.int64)
    keys = np.empty(n_items)  # −fused value (float32 values, held exactly)
    negated = np.empty(n_items, np.float32)  # −fused value of every item (a catalogue scan)
    sample = np.empty(2 * SAMPLE)
    fused_items = np.empty(n_items, np.int64)
    use_base = len(base[0]) > 0
    count = np.empty(n_items if use_base else 0, np.int32)
    only_n, only_b = np.empty(max(k_eff, 1), np.int64), np.empty(len(base[0]), np.int64)
    for u in range(n):
        _distances(u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, slot, dense,
                   dots, dist)  # fmt: skip
        n_found = _nearest(dist, rows, n_pool, k_eff, pos, nearest, work)
        neighbours = nearest[:n_found]  # ascending rows
        w = 1.0 / max(n_found, 1)
        for e in range(own_ptr[u], own_ptr[u + 1]):
            own[own_idx[e]] = own_val[e]
        if use_base and _mean_from_base(neighbours, w, base, pool_ptr, pool_idx, pool_val, mean, count, only_n, only_b):
            n_cand = -1  # every item may be a candidate: the catalogue scan below
        else:
            n_cand = _neighbour_sum(u, neighbours, w, own_ptr, pool_ptr, pool_idx, pool_val, mean, seen, cand)
        if n_cand < 0:
            # Many candidates: each α's values over the whole catalogue, in item order (an item
            # outside the candidates has own = mean = 0, so value 0, not kept; at α = 1 only
            # u's own items can be positive), the last pass clearing own and mean.
            for a in range(n_alpha):
                if alphas[a] == 1.0:  # u's own vector alone: positive at its own items only
                    n_pos = _own_listed(u, own_ptr, own_idx, own, mean, keys, fused_items)
                    if a == n_alpha - 1:
                        mean[:] = 0.0
                        own[:] = 0.0
                else:
                    n_pos = _fused_scan(own, mean, alphas[a], a == n_alpha - 1, top, negated, keys, fused_items, sample)
                at = offsets[a, u]
                kept = top_scaled_row(keys, fused_items, n_pos, top, scratch, out_items[a, at:], out_values[a, at:])
                offsets[a, u + 1] = at + kept
            if n_alpha == 0:
                mean[:] = 0.0
                own[:] = 0.0
            continue
        n_cand = _list_own(u, own_ptr, own_idx, seen, cand, n_cand)  # then u's own items
        for a in range(n_alpha):
            n_pos = _fused_positive(cand, n_cand, own, mean, alphas[a], keys, fused_items)
            for c in range(n_pos):
                keys[c] = -keys[c]
            at = offsets[a, u]
            kept = top_scaled_row(keys, fused_items, n_pos, top, scratch, out_items[a, at:], out_values[a, at:])
            offsets[a, u + 1] = at + kept
        for c in range(n_cand):
            i = cand[c]
            seen[i] = 0
            mean[i] = 0.0
            own[i] = 0.0
    return offsets, out_items, out_values


@numba.njit(**_JIT)
def tifu_neighbours(
    own_ptr, own_idx, own_val, same_ptr, same_rows, pool_ptr, pool_idx, pool_val,
    inv_ptr, inv_rows, inv_val, sq_norms, slot, dense, k,
):  # pragma: no cover - jit
    """The neighbours :func:`tifu_kept_scores` averages for each query: its k nearest pool rows
    (ties to the lower row, infinite distances left out), in ascending row order, -1 after.

    Shapes: as :func:`tifu_kept_scores` -> [n, k] int64."""
    n = len(own_ptr) - 1
    n_pool = len(sq_norms)
    k_eff = min(k, n_pool)
    out = np.full((n, k), -1, np.int64)
    dots = np.zeros(n_pool)
    dist = np.empty(n_pool)
    rows = np.arange(n_pool)
    nearest = np.empty(max(k_eff, 1), np.int64)
    pos = np.empty(n_pool, np.int64)
    work = np.empty(n_pool)
    for u in range(n):
        _distances(u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, slot, dense,
                   dots, dist)  # fmt: skip
        n_found = _nearest(dist, rows, n_pool, k_eff, pos, nearest, work)
        out[u, :n_found] = nearest[:n_found]
    return out


@numba.njit(**_JIT)
def decayed_rows(instance_ptr, basket_ptr, basket_items, basket_weights, n_items):  # pragma: no cover - jit
    """Each instance's Σ over its baskets' entries of the basket's weight, per item (a repeated
    entry counts again), summed in entry order: ``np.bincount`` of the (instance, item) keys
    with the entries' weights, as a CSR with ascending items.

    Shapes: instance_ptr [n + 1] (baskets of each instance); basket_ptr [B + 1], basket_items
    [nnz]; basket_weights [B] -> (indptr [n + 1], items [≥ m] int64, values [≥ m] float64).
    """
    n = len(instance_ptr) - 1
    indptr = np.zeros(n + 1, np.int64)
    out_items = np.empty(len(basket_items), np.int64)
    out_values = np.empty(len(basket_items))
    acc = np.zeros(n_items)
    seen = np.zeros(n_items, np.int64)
    touched = np.empty(n_items, np.int64)
    m = 0
    for u in range(n):
        n_t = 0
        for b in range(instance_ptr[u], instance_ptr[u + 1]):
            w = basket_weights[b]
            for e in range(basket_ptr[b], basket_ptr[b + 1]):
                i = basket_items[e]
                acc[i] += w
                touched[n_t] = i  # listed only the first time (branch-free)
                n_t += 1 - seen[i]
                seen[i] = 1
        listed = np.sort(touched[:n_t])
        for j in range(n_t):
            i = listed[j]
            out_items[m] = i
            out_values[m] = acc[i]
            m += 1
            acc[i] = 0.0
            seen[i] = 0
        indptr[u + 1] = m
    return indptr, out_items, out_values
