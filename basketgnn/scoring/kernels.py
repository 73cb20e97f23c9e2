"""Compiled per-customer kernels of the scoring path (numba): TIFU-KNN's search and kept
scores (:func:`tifu_kept_scores`), the item-transition score (:func:`transition_kept_scores`),
the weighted union of the two (:func:`weighted_union`), the fused top-k
(:func:`candidate_top_k`), and for the fusion's choice on validation TIFU's tuning grid
(:func:`tifu_ranked`) and each grid point's top-k (:func:`fused_top_k_dense`).

Each kernel is an exact reformulation of the NumPy / SciPy batch code it replaced: the same
float operations on the same values in the same order, so the same bits (the tests compare
them with that code and with dense references). What changes is the cost: a customer's work
touches only its own entries (its items' pool rows, its neighbours' items, its candidates)
inside scratch arrays reused from customer to customer, instead of dense [chunk, P] and
[chunk, I] blocks, sparse-matrix products that allocate their output twice, and full-width
top-k's. On TaFeng (P = 6,888 pool customers, I = 4,935 items) the search and both scores of a
customer take ~120 µs instead of ~0.6 ms (BENCHMARKS.md §6f).

Orders that fix the bits (each is the order of the code it replaced, written out):

- a dot product q · v_p sums over the query's items in ascending item order;
- a neighbour mean sums w · v_n over the neighbours in ascending pool row order, with
  w = 1 / (number of neighbours found);
- TIFU's fused value is float32(α · own + (1 − α) · mean);
- the decayed history h sums each basket's weight over the baskets in time order;
- the transition score t = h S sums h_i · S_ij over the customer's items in the reverse order
  of their first appearance (baskets in time order, items ascending within a basket): the order
  in which SciPy's CSR product emits h's entries, which the validated choices were made with.

The kernels release the GIL (``nogil``): the recommender runs them on worker threads beside the
model. They run one customer after another; nothing is parallel inside them.

Shapes in this module: n customers, P pool customers, I items.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)
#: Keys sampled to set a selection threshold (:func:`_smallest`).
_SAMPLE = 256


@numba.njit(**_JIT)
def _select(a, n, k):  # pragma: no cover - jit
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


@numba.njit(**_JIT)
def _smallest(keys, ids, count, m, pos, out, work):  # pragma: no cover - jit
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
        # τ: the sample's quantile at 1.5 m / count, so about 1.5 m keys are expected at or
        # below it (a margin of several standard errors of the sampled quantile).
        stride = max(1, count // _SAMPLE)
        n_sample = count // stride
        rank = min(n_sample - 1, (3 * m * n_sample) // (2 * count))
        while True:
            for j in range(n_sample):
                work[j] = keys[j * stride]
            tau = _select(work, n_sample, rank)
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
    cut = _select(work, n, m - 1)
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
        id_cut = _select(work, n_equal, need - 1)  # ids are distinct
    taken = 0
    for j in range(kept):
        c = pos[j]
        if keys[c] < cut or ids[c] <= id_cut:  # the rest of pos[:kept] equals the cut
            out[taken] = c
            taken += 1
    return m


@numba.njit(**_JIT)
def _keep_top_sorted(keys, items, count, top, scratch, out_items, out_values):  # pragma: no cover - jit
    """The ``top`` largest entries of (values, items[:count]), given as keys[:count] = −values
    (the callers pass positive values only, negated as they are listed: exact, negation only
    flips the sign bit; ties to the lower item; items distinct), written to out_* in ascending
    item order, each value divided by the largest one. Returns the number written.

    Shapes: keys [≥ count] float64, items [≥ count] int64; scratch: a tuple (pos [≥ count]
    int64, keep [≥ top] int64, work [≥ count] float64, value_of [I] float64); out_items [≥ top]
    int64, out_values [≥ top] float64.
    """
    pos, keep, work, value_of = scratch
    kept = _smallest(keys, items, count, top, pos, keep, work)
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
def _scatter(acc, idx, val, lo, hi, scale):  # pragma: no cover - jit
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
def _add_scaled(acc, idx, val, lo, hi, scale, track, listed_flag, listed, n):  # pragma: no cover - jit
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
        _scatter(acc, idx, val, lo, hi, scale)
    return n


@numba.njit(**_JIT)
def _distances(
    u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, dots, dist,
):  # pragma: no cover - jit
    """dist[p] = ||v_p||² − 2 q_u · v_p for every pool row p (infinite for u's ``same_rows``),
    each dot product summed over u's items in ascending order. ``dots`` is zero before and after.

    Shapes: dots, dist [P] float64 (scratch / output)."""
    for e in range(own_ptr[u], own_ptr[u + 1]):
        q = own_val[e]
        i = own_idx[e]
        _scatter(dots, inv_rows, inv_val, inv_ptr[i], inv_ptr[i + 1], q)
    for p in range(len(sq_norms)):
        dist[p] = sq_norms[p] - 2.0 * dots[p]
        dots[p] = 0.0
    for e in range(same_ptr[u], same_ptr[u + 1]):
        dist[same_rows[e]] = np.inf


@numba.njit(**_JIT)
def _by_key(keys, rows, size):  # pragma: no cover - jit
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
    for p in neighbours:
        n_cand = _add_scaled(mean, pool_idx, pool_val, pool_ptr[p], pool_ptr[p + 1], w, not scan, seen, cand, n_cand)
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
def _fused_scan(own, mean, alpha, clear, keys, items):  # pragma: no cover - jit
    """The negated TIFU values −float32(α · own + (1 − α) · mean) of the items with a positive
    one, in keys (float64, exact) and items, in item order (branch-free); with ``clear``, own
    and mean are set to 0 on the way. Returns their number.

    Shapes: own, mean [I]; keys, items [I] (outputs)."""
    rest = 1.0 - alpha
    n_pos = 0
    for i in range(len(mean)):
        v = np.float32(alpha * own[i] + rest * mean[i])
        keys[n_pos] = -np.float64(v)
        items[n_pos] = i
        n_pos += v > 0
        if clear:
            own[i] = 0.0
            mean[i] = 0.0
    return n_pos


@numba.njit(**_JIT)
def tifu_ranked(
    own_ptr, own_idx, own_val, same_ptr, same_rows, pool_ptr, pool_idx, pool_val,
    inv_ptr, inv_rows, inv_val, sq_norms, ks, alphas, cut, n_items,
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
        _distances(u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, dots, dist)
        size = _smallest(dist, rows, n_pool, k_max, pos, nearest, work)
        by_distance = _by_key(dist, nearest, size)  # nearest first, rows ascending among equals
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
                    size_best = _insert(best_v, best_i, size_best, cut, fused[c], fused_items[c])
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
def tifu_kept_scores(
    own_ptr, own_idx, own_val, same_ptr, same_rows, pool_ptr, pool_idx, pool_val,
    inv_ptr, inv_rows, inv_val, sq_norms, k, alphas, top, n_items,
):  # pragma: no cover - jit
    """TIFU-KNN's kept scores of each query, for each α (``scoring.tifu``, float64 search).

    For query u: distances ||v_p||² − 2 q_u · v_p to every pool row p (rows in ``same_rows``
    of u: infinite), the k smallest (ties to the lower row; infinite ones are not neighbours),
    the neighbours' mean m_u, and for each α the ``top`` largest positive entries of
    float32(α · q_u + (1 − α) · m_u) (ties to the lower item), divided by the largest.

    Shapes: own_* CSR [n, I] (items ascending); same_ptr [n + 1], same_rows [*]; pool_* CSR
    [P, I] (items ascending); inv_* its transpose [I, P] (rows ascending); sq_norms [P];
    alphas [A] -> (offsets [A, n + 1], items [A, ≥ nnz] int64, values [A, ≥ nnz] float64): row u
    of α number a is items[a, offsets[a, u]:offsets[a, u + 1]].
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
    fused_items = np.empty(n_items, np.int64)
    for u in range(n):
        _distances(u, own_ptr, own_idx, own_val, same_ptr, same_rows, inv_ptr, inv_rows, inv_val, sq_norms, dots, dist)
        # The k smallest (distance, row); infinite ones are not neighbours.
        size = _smallest(dist, rows, n_pool, k_eff, pos, nearest, work)
        n_found = 0
        for j in range(size):
            if dist[nearest[j]] < np.inf:
                nearest[n_found] = nearest[j]
                n_found += 1
        neighbours = nearest[:n_found]  # ascending rows
        w = 1.0 / max(n_found, 1)
        for e in range(own_ptr[u], own_ptr[u + 1]):
            own[own_idx[e]] = own_val[e]
        n_cand = _neighbour_sum(u, neighbours, w, own_ptr, pool_ptr, pool_idx, pool_val, mean, seen, cand)
        if n_cand < 0:
            # Many candidates: each α's values over the whole catalogue, in item order (an item
            # outside the candidates has own = mean = 0, so value 0, not kept), the last pass
            # clearing own and mean.
            for a in range(n_alpha):
                n_pos = _fused_scan(own, mean, alphas[a], a == n_alpha - 1, keys, fused_items)
                at = offsets[a, u]
                kept = _keep_top_sorted(keys, fused_items, n_pos, top, scratch, out_items[a, at:], out_values[a, at:])
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
            kept = _keep_top_sorted(keys, fused_items, n_pos, top, scratch, out_items[a, at:], out_values[a, at:])
            offsets[a, u + 1] = at + kept
        for c in range(n_cand):
            i = cand[c]
            seen[i] = 0
            mean[i] = 0.0
            own[i] = 0.0
    return offsets, out_items, out_values


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
            n_t = _add_scaled(t, s_idx, s_val, s_ptr[i], s_ptr[i + 1], hi, not scan, in_t, t_items, n_t)
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
        offsets[u + 1] = at + _keep_top_sorted(keys, kept_items, n_pos, top, scratch, out_items[at:], out_values[at:])
        for c in range(n_h):
            i = first_seen[c]
            h[i] = 0.0
            in_h[i] = False
            counted_in[i] = -1
    return offsets, out_items, out_values


@numba.njit(**_JIT)
def weighted_union(a_ptr, a_items, a_values, a_weight, b_ptr, b_items, b_values, b_weight):  # pragma: no cover - jit
    """Row by row, (0 + w_a · a) + w_b · b on the union of the rows' items (ascending; a
    missing entry is 0): ``SparseScores.weighted_sum`` of two parts.

    Shapes: a_*, b_* CSR of n rows (items ascending) -> (offsets [n + 1], items [≥ nnz],
    values [≥ nnz]): buffers of len(a) + len(b) entries, the first offsets[-1] used.
    """
    n = len(a_ptr) - 1
    offsets = np.zeros(n + 1, np.int64)
    items = np.empty(len(a_items) + len(b_items), np.int64)
    values = np.empty(len(a_items) + len(b_items))
    m = 0
    for u in range(n):
        x, x_end, y, y_end = a_ptr[u], a_ptr[u + 1], b_ptr[u], b_ptr[u + 1]
        while x < x_end or y < y_end:
            if y == y_end or (x < x_end and a_items[x] < b_items[y]):
                items[m] = a_items[x]
                values[m] = (0.0 + a_weight * a_values[x]) + b_weight * 0.0
                x += 1
            elif x == x_end or b_items[y] < a_items[x]:
                items[m] = b_items[y]
                values[m] = (0.0 + a_weight * 0.0) + b_weight * b_values[y]
                y += 1
            else:
                items[m] = a_items[x]
                values[m] = (0.0 + a_weight * a_values[x]) + b_weight * b_values[y]
                x += 1
                y += 1
            m += 1
        offsets[u + 1] = m
    return offsets, items, values


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
            size = _insert(best_v, best_i, size, k, value[i], i)
        taken = 0
        for pos in range(n_items):  # the first k items of the order outside the row's own
            if taken == k:
                break
            i = order[pos]
            if in_s[i]:
                continue
            taken += 1
            size = _insert(best_v, best_i, size, k, shared[i], i)
        for c in range(size):
            out_items[u, c] = best_i[c]
            out_values[u, c] = best_v[c]
        for c in range(n_s):
            in_s[members[c]] = False
    return out_items, out_values


@numba.njit(**_JIT)
def _insert(best_v, best_i, size, k, v, i):  # pragma: no cover - jit
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
def fused_top_k_dense(normalised, prefix, add_ptr, add_items, add_values, weight, k, by_item):  # pragma: no cover - jit
    """Each row's top k of f = (1 − weight) · normalised + addend (ties to the lower item):
    ``metrics.top_k`` of ``fusion._fuse_normalised``'s dense rows, without building them.

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
            size = _insert(best_v, best_i, size, k, rest * normalised[u, i] + add_values[e], i)
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
            size = _insert(best_v, best_i, size, k, f, i)
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
