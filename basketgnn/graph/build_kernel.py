"""The factored co-occurrence graphs of :func:`basketgnn.graph.cooccurrence.build_user_graphs`,
compiled (numba): customer by customer, each customer's entries, pairs and slots sorted within
the customer rather than over every entry of every customer at once (the NumPy form's large
sorts). Integer outputs, equal element for element to the NumPy form's (the tests compare the
two; ``build_user_graphs(..., compiled=False)`` is the NumPy form). The helpers are inlined
(``inline="always"``), so the loops compile as one function.

For instance u with entries e (its present node-timestamps, basket by basket; item[e], the
basket's time t[e]):

- nodes: u's distinct items, ascending; ``entry_node`` maps each entry to its node (global ids,
  instance by instance), ``node_present`` counts each node's entries;
- ``max_c``: the largest number of u's baskets holding the same two distinct items (1 if no
  pair repeats; only items bought at least twice can repeat a pair), counted as the NumPy
  form counts ordered pairs of entries: an item listed twice in one basket counts its pair
  with itself twice;
- the entries of B: for each node (in order), each ordered pair (a, b) of its entries (in entry
  order, a = b included): ``pair_row`` = a's position among u's entries, ``pair_slot`` = the
  rank of (t[a], t[b]) among u's distinct (t, s) pairs in ascending order.

Shapes: n instances, E entries, N nodes, F entries of B.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)
#: Histories up to this many baskets rank their (t, s) slots through a dense T x T table.
_TABLE_T = 64
#: Customers with up to this many items bought at least twice count their pairs in a dense table.
_TABLE_NODES = 128


@numba.njit(**_JIT)
def factored_graphs(entry_offsets, item, entry_t, n_history, n_items):  # pragma: no cover - jit
    """Nodes, max c and the factored entries of every instance (module docstring).

    Shapes: entry_offsets [n + 1] (u's entries, basket by basket); item, entry_t [E];
    n_history [n] -> (node_key [N] = u · n_items + item, entry_node [E], node_present [N],
    node_offsets [n + 1], max_c [n] float64, pair_offsets [n + 1], pair_row [F],
    pair_slot [F], slot_offsets [n + 1]).
    """
    node_key, entry_node, node_present, node_offsets, node_first, order = _nodes(
        entry_offsets, item, n_items
    )
    max_c = _max_c(entry_offsets, entry_t, entry_node, node_present, node_offsets)
    pair_offsets, pair_row, pair_slot, slot_offsets = _pairs(
        entry_offsets, entry_t, n_history, node_present, node_offsets, node_first, order
    )
    return (
        node_key, entry_node, node_present, node_offsets, max_c,
        pair_offsets, pair_row, pair_slot, slot_offsets,
    )


@numba.njit(**_JIT, inline="always")
def _nodes(entry_offsets, item, n_items):  # pragma: no cover - jit
    """Each instance's distinct items as nodes, ascending, and its entries listed node by node.

    Shapes: -> node_key [N], entry_node [E], node_present [N], node_offsets [n + 1],
    node_first [N + 1] (each node's first position in ``order``), order [E] (entries node by
    node, in entry order within a node).
    """
    n = len(entry_offsets) - 1
    E = len(item)
    entry_node = np.empty(E, np.int64)
    node_key = np.empty(E, np.int64)  # at most one node per entry; trimmed at the end
    node_present = np.zeros(E, np.int64)
    node_offsets = np.zeros(n + 1, np.int64)
    node_first = np.empty(E + 1, np.int64)
    order = np.empty(E, np.int64)
    N = 0
    for u in range(n):
        lo, hi = entry_offsets[u], entry_offsets[u + 1]
        by_item = np.argsort(item[lo:hi], kind="mergesort")  # stable: entry order among equals
        for j in range(hi - lo):
            e = lo + by_item[j]
            if j == 0 or item[e] != item[lo + by_item[j - 1]]:
                node_key[N] = u * n_items + item[e]
                node_first[N] = lo + j
                N += 1
            entry_node[e] = N - 1
            node_present[N - 1] += 1
            order[lo + j] = e
        node_offsets[u + 1] = N
    node_first[N] = E
    return node_key[:N].copy(), entry_node, node_present[:N].copy(), node_offsets, node_first[: N + 1], order


@numba.njit(**_JIT, inline="always")
def _basket_end(entry_t, start, hi):  # pragma: no cover - jit
    """The end of the basket starting at entry ``start``: its run of entries with one time."""
    end = start + 1
    while end < hi and entry_t[end] == entry_t[start]:
        end += 1
    return end


@numba.njit(**_JIT, inline="always")
def _max_c(entry_offsets, entry_t, entry_node, node_present, node_offsets):  # pragma: no cover - jit
    """Each instance's max c: the largest number of its baskets holding the same two distinct
    nodes, over the pairs of nodes bought at least twice (1 if none repeats). Shape [n].

    With w such nodes, up to ``_TABLE_NODES``: the pairs counted in a w x w table
    (:func:`_max_pair_count`); more: their keys sorted and the runs counted. Integer counts
    either way: the same max."""
    n = len(entry_offsets) - 1
    max_c = np.ones(n, np.float64)
    keys = np.empty(0, np.int64)
    local = np.full(len(node_present), -1, np.int64)  # a repeated node's index among its instance's
    table = np.zeros(_TABLE_NODES * _TABLE_NODES, np.int32)
    for u in range(n):
        lo, hi = entry_offsets[u], entry_offsets[u + 1]
        w = 0
        for v in range(node_offsets[u], node_offsets[u + 1]):
            if node_present[v] >= 2:
                local[v] = w
                w += 1
        if w == 0:
            continue
        if w <= _TABLE_NODES:
            max_c[u] = _max_pair_count(lo, hi, entry_t, entry_node, local, w, table)
            table[: w * w] = 0
            continue
        n_keys = _count_pair_keys(lo, hi, entry_t, entry_node, node_present)
        if len(keys) < n_keys:
            keys = np.empty(2 * n_keys, np.int64)
        _fill_pair_keys(lo, hi, entry_t, entry_node, node_present, node_offsets[u],
                        node_offsets[u + 1] - node_offsets[u], keys)  # fmt: skip
        run_keys = np.sort(keys[:n_keys])
        run = 1
        for j in range(1, n_keys + 1):
            if j < n_keys and run_keys[j] == run_keys[j - 1]:
                run += 1
            else:
                if run > max_c[u]:
                    max_c[u] = run
                run = 1
    return max_c


@numba.njit(**_JIT, inline="always")
def _max_pair_count(lo, hi, entry_t, entry_node, local, w, table):  # pragma: no cover - jit
    """The largest count of :func:`_fill_pair_keys`' keys for the entries ``lo .. hi - 1``
    (at least 1), counted in ``table[i * w + j]`` (local indices i <= j of the repeated nodes;
    ``local`` -1 for the others). ``table[:w * w]`` is zero before and is left with the counts."""
    best = 1
    start = lo
    while start < hi:
        end = _basket_end(entry_t, start, hi)
        for a in range(start, end):
            i = local[entry_node[a]]
            if i >= 0:
                for b in range(a + 1, end):
                    j = local[entry_node[b]]
                    if j >= 0:
                        key = min(i, j) * w + max(i, j)
                        count = table[key] + (2 if i == j else 1)
                        table[key] = count
                        best = max(best, count)
        start = end
    return best


@numba.njit(**_JIT, inline="always")
def _count_pair_keys(lo, hi, entry_t, entry_node, node_present):  # pragma: no cover - jit
    """How many pair keys :func:`_fill_pair_keys` writes for the entries ``lo .. hi - 1``."""
    n_keys = 0
    start = lo
    while start < hi:
        end = _basket_end(entry_t, start, hi)
        for a in range(start, end):
            if node_present[entry_node[a]] >= 2:
                for b in range(a + 1, end):
                    if node_present[entry_node[b]] >= 2:
                        n_keys += 2 if entry_node[a] == entry_node[b] else 1
        start = end
    return n_keys


@numba.njit(**_JIT, inline="always")
def _fill_pair_keys(lo, hi, entry_t, entry_node, node_present, base, width, keys):  # pragma: no cover - jit
    """Into ``keys``: one key ``i * width + j`` (local nodes i <= j) per pair of entries of one
    basket whose nodes are bought at least twice, counted as the NumPy form counts ordered pairs
    (an item listed twice in a basket: both orders share the key)."""
    k = 0
    start = lo
    while start < hi:
        end = _basket_end(entry_t, start, hi)
        for a in range(start, end):
            na = entry_node[a]
            if node_present[na] >= 2:
                for b in range(a + 1, end):
                    nb = entry_node[b]
                    if node_present[nb] >= 2:
                        i, j = min(na, nb) - base, max(na, nb) - base
                        keys[k] = i * width + j
                        k += 1
                        if na == nb:
                            keys[k] = i * width + j
                            k += 1
        start = end


@numba.njit(**_JIT, inline="always")
def _pairs(entry_offsets, entry_t, n_history, node_present, node_offsets, node_first, order):  # pragma: no cover - jit
    """The entries of B, instance by instance, node by node: for each ordered pair (a, b) of a
    node's entries, a's row and the rank of (t[a], t[b]) among the instance's (t, s) slots.

    Shapes: -> pair_offsets [n + 1], pair_row [F], pair_slot [F], slot_offsets [n + 1].
    """
    n = len(entry_offsets) - 1
    F = 0
    for v in range(len(node_present)):
        F += node_present[v] * node_present[v]
    pair_offsets = np.zeros(n + 1, np.int64)
    pair_row = np.empty(F, np.int64)
    pair_slot = np.empty(F, np.int64)
    slot_offsets = np.zeros(n + 1, np.int64)
    t_max = 0
    for u in range(n):
        t_max = max(t_max, n_history[u])
    # (t, s) -> slot through a table of T^2 entries for histories up to _TABLE_T baskets; longer
    # ones rank their keys by a sort (memory of their pairs, not of T^2).
    t_table = max(1, min(t_max, _TABLE_T))
    slot_id = np.full(t_table * t_table, -1, np.int64)
    listed = np.empty(t_table * t_table, np.int64)
    q = 0
    for u in range(n):
        lo = entry_offsets[u]
        T = n_history[u]
        table = T <= _TABLE_T
        start = q
        n_listed = 0
        for v in range(node_offsets[u], node_offsets[u + 1]):
            for x in range(node_first[v], node_first[v + 1]):
                for y in range(node_first[v], node_first[v + 1]):
                    a, b = order[x], order[y]
                    key = entry_t[a] * T + entry_t[b]
                    if table and slot_id[key] < 0:  # a (t, s) slot seen for the first time
                        slot_id[key] = 0
                        listed[n_listed] = key
                        n_listed += 1
                    pair_row[q] = a - lo
                    pair_slot[q] = key  # replaced by the slot's rank below
                    q += 1
        pair_offsets[u + 1] = q
        if table:
            _rank_by_table(pair_slot, start, q, slot_id, listed, n_listed)
            slot_offsets[u + 1] = slot_offsets[u] + n_listed
        else:
            slot_offsets[u + 1] = slot_offsets[u] + _rank_by_sort(pair_slot, start, q)
    return pair_offsets, pair_row, pair_slot, slot_offsets


@numba.njit(**_JIT, inline="always")
def _rank_by_sort(pair_slot, start, stop):  # pragma: no cover - jit
    """Replace the keys ``pair_slot[start:stop]`` by their ranks among the distinct ones (a sort);
    returns how many distinct keys there are."""
    keys_u = np.unique(pair_slot[start:stop])  # sorted
    for f in range(start, stop):
        pair_slot[f] = np.searchsorted(keys_u, pair_slot[f])
    return len(keys_u)


@numba.njit(**_JIT, inline="always")
def _rank_by_table(pair_slot, start, stop, slot_id, listed, n_listed):  # pragma: no cover - jit
    """:func:`_rank_by_sort` through the dense table ``slot_id``, where the keys of
    ``pair_slot[start:stop]`` are marked (0; -1 elsewhere, and everywhere afterwards) and the
    ``n_listed`` distinct ones listed in ``listed``: only those are sorted."""
    ranked = np.sort(listed[:n_listed])
    for r in range(n_listed):
        slot_id[ranked[r]] = r
    for f in range(start, stop):
        pair_slot[f] = slot_id[pair_slot[f]]
    for r in range(n_listed):
        slot_id[listed[r]] = -1
