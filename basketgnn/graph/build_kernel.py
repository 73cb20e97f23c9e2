"""The factored co-occurrence graphs of :func:`basketgnn.graph.cooccurrence.build_user_graphs`,
compiled (numba): customer by customer instead of sorts over every entry of every customer
(the NumPy form sorted ~400k entry keys, ~250k pair keys and ~560k slot keys on TaFeng, three
quarters of the build's time). Integer outputs, equal element for element to the NumPy form's
(the tests compare the two; ``build_user_graphs(..., compiled=False)`` keeps the NumPy form).

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


@numba.njit(**_JIT)
def factored_graphs(entry_offsets, item, entry_t, n_history, n_items):  # pragma: no cover - jit
    """Nodes, max c and the factored entries of every instance (module docstring).

    Shapes: entry_offsets [n + 1] (u's entries, basket by basket); item, entry_t [E];
    n_history [n] -> (node_key [N] = u · n_items + item, entry_node [E], node_present [N],
    node_offsets [n + 1], max_c [n] float64, pair_offsets [n + 1], pair_row [F],
    pair_slot [F], slot_offsets [n + 1]).
    """
    n = len(entry_offsets) - 1
    E = len(item)
    entry_node = np.empty(E, np.int64)
    node_key = np.empty(E, np.int64)  # at most one node per entry; trimmed at the end
    node_present = np.zeros(E, np.int64)
    node_offsets = np.zeros(n + 1, np.int64)
    node_first = np.empty(E + 1, np.int64)  # each node's first position in `order`
    order = np.empty(E, np.int64)  # entries node by node, in entry order within a node
    max_c = np.ones(n, np.float64)
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
    # max c: pairs of distinct nodes bought at least twice, basket by basket.
    keys = np.empty(0, np.int64)
    for u in range(n):
        lo, hi = entry_offsets[u], entry_offsets[u + 1]
        n_keys = 0
        start = lo
        while start < hi:  # each basket: a run of entries with the same time
            end = start + 1
            while end < hi and entry_t[end] == entry_t[start]:
                end += 1
            for a in range(start, end):
                if node_present[entry_node[a]] >= 2:
                    for b in range(a + 1, end):
                        if node_present[entry_node[b]] >= 2:
                            n_keys += 2 if entry_node[a] == entry_node[b] else 1
            start = end
        if n_keys == 0:
            continue
        if len(keys) < n_keys:
            keys = np.empty(2 * n_keys, np.int64)
        k = 0
        base = node_offsets[u]
        width = node_offsets[u + 1] - base
        start = lo
        while start < hi:
            end = start + 1
            while end < hi and entry_t[end] == entry_t[start]:
                end += 1
            for a in range(start, end):
                na = entry_node[a]
                if node_present[na] >= 2:
                    for b in range(a + 1, end):
                        nb = entry_node[b]
                        if node_present[nb] >= 2:
                            i, j = min(na, nb) - base, max(na, nb) - base
                            keys[k] = i * width + j
                            k += 1
                            if na == nb:  # an item twice in a basket: both orders share the key
                                keys[k] = i * width + j
                                k += 1
            start = end
        run_keys = np.sort(keys[:n_keys])
        run = 1
        for j in range(1, n_keys + 1):
            if j < n_keys and run_keys[j] == run_keys[j - 1]:
                run += 1
            else:
                if run > max_c[u]:
                    max_c[u] = run
                run = 1
    # The entries of B, instance by instance, node by node.
    F = 0
    for v in range(N):
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
        if T > _TABLE_T:
            start = q
            for v in range(node_offsets[u], node_offsets[u + 1]):
                for x in range(node_first[v], node_first[v + 1]):
                    for y in range(node_first[v], node_first[v + 1]):
                        a, b = order[x], order[y]
                        pair_row[q] = a - lo
                        pair_slot[q] = entry_t[a] * T + entry_t[b]
                        q += 1
            pair_offsets[u + 1] = q
            keys_u = np.unique(pair_slot[start:q])  # sorted
            for f in range(start, q):
                pair_slot[f] = np.searchsorted(keys_u, pair_slot[f])
            slot_offsets[u + 1] = slot_offsets[u] + len(keys_u)
            continue
        n_listed = 0
        for v in range(node_offsets[u], node_offsets[u + 1]):
            for x in range(node_first[v], node_first[v + 1]):
                for y in range(node_first[v], node_first[v + 1]):
                    a, b = order[x], order[y]
                    key = entry_t[a] * T + entry_t[b]
                    if slot_id[key] < 0:
                        slot_id[key] = 0
                        listed[n_listed] = key
                        n_listed += 1
                    pair_row[q] = a - lo
                    pair_slot[q] = key  # replaced by the slot's rank below
                    q += 1
        pair_offsets[u + 1] = q
        ranked = np.sort(listed[:n_listed])
        for r in range(n_listed):
            slot_id[ranked[r]] = r
        for f in range(pair_offsets[u], q):
            pair_slot[f] = slot_id[pair_slot[f]]
        for r in range(n_listed):
            slot_id[listed[r]] = -1
        slot_offsets[u + 1] = slot_offsets[u] + n_listed
    return (
        node_key[:N].copy(), entry_node, node_present[:N].copy(), node_offsets, max_c,
        pair_offsets, pair_row, pair_slot, slot_offsets,
    )
