"""Compiled pieces of :meth:`basketgnn.graph.cooccurrence.UserGraphs.collate` (numba): stable
counting sorts of small non-negative integer keys in place of NumPy's comparison sorts, with
the same outputs element for element (the tests compare them with ``np.argsort(kind="stable")``
and ``np.unique``). A batch's keys are node ids and item ids, bounded by the batch's nodes and
the catalogue, so a count per key costs less than sorting. :func:`collate_factored` is the
whole collate of the factored form: one loop per array in place of the NumPy form's dozen
passes of gathers, repeats and scatters (which stay as its reference). :func:`node_subset` is
:class:`~basketgnn.graph.attention_plan.NodeSubset`'s gather of some of a batch's nodes' present
rows in one pass, and :func:`entries_in` which of a batch's (row, item) entries a reading at given items
needs (``models.spec.wanted_entries``); their tensor forms stay as the references, and run off
the CPU.

Shapes: n keys.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def _place(keys, order_in, n_keys, order_out):  # pragma: no cover - jit
    """order_out = order_in stably reordered by keys[order_in] (a counting sort)."""
    start = np.zeros(n_keys + 1, np.int64)
    for i in order_in:
        start[keys[i] + 1] += 1
    for k in range(n_keys):
        start[k + 1] += start[k]
    for i in order_in:
        k = keys[i]
        order_out[start[k]] = i
        start[k] += 1


@numba.njit(**_JIT)
def stable_order(keys, n_keys):  # pragma: no cover - jit
    """``np.argsort(keys, kind="stable")`` for keys in [0, n_keys).

    Shapes: keys [n] int64 -> [n] int64."""
    out = np.empty(len(keys), np.int64)
    _place(keys, np.arange(len(keys)), n_keys, out)
    return out


@numba.njit(**_JIT)
def unique_pairs(major, minor, n_major, n_minor):  # pragma: no cover - jit
    """``np.unique(major * n_minor + minor, return_index=True, return_inverse=True)[1:]`` for
    major in [0, n_major) and minor in [0, n_minor): the first position of each distinct
    (major, minor), in ascending (major, minor) order, and each position's distinct pair.
    Two stable counting sorts (by minor, then by major) order the positions by (major, minor),
    equal pairs by position, so each pair's first position leads its run.

    Shapes: major, minor [n] int64 -> (first [U] int64, inverse [n] int64)."""
    n = len(major)
    by_minor = np.empty(n, np.int64)
    _place(minor, np.arange(n), n_minor, by_minor)
    order = np.empty(n, np.int64)
    _place(major, by_minor, n_major, order)
    first = np.empty(n, np.int64)
    inverse = np.empty(n, np.int64)
    u = 0
    for j in range(n):
        i = order[j]
        if j == 0 or major[i] != major[order[j - 1]] or minor[i] != minor[order[j - 1]]:
            first[u] = i
            u += 1
        inverse[i] = u - 1
    return first[:u], inverse


#: What :func:`collate_factored` returns after the adjacency's five fields: GraphBatch's fields.
BATCH_FIELDS = (
    "row_node", "row_weight", "row_present", "node_item", "node_user", "node_len", "node_count", "node_last",
    "node_rows", "node_times", "absent_row",
)  # fmt: skip


@numba.njit(**_JIT)
def collate_factored(
    idx, n_history, node_offsets, node_item, node_present, present_offsets, present_node, present_t, self_w,
    pair_offsets, pair_row, pair_slot, slot_offsets, share,
):  # pragma: no cover - jit
    """:meth:`~basketgnn.graph.cooccurrence.UserGraphs.collate` of the factored form, compiled:
    element for element what the NumPy form gives (the tests compare them). Instance b's
    present rows start at row_base[b]; then (``share`` False) its nodes' absent rows, or
    (``share``) after every present row one absent row per distinct (item, self weight) of the
    batch, ascending, standing for the first node that has it, the nodes' multiplicities summed
    in node order.

    Shapes: idx [B]; the graphs' arrays (:class:`~basketgnn.graph.cooccurrence.UserGraphs`) ->
    (FactoredAdjacency's pair_row [F_b], pair_slot [F_b], num_slots, row_scale [R], row_self [R]
    float32, then
    :data:`BATCH_FIELDS`: row_node [R], row_weight [R] float32, row_present [R] bool,
    node_item, node_user, node_len, node_count, node_last [M], node_rows, node_times [P_b],
    absent_row [M]).
    """
    B = len(idx)
    node_base = np.zeros(B + 1, np.int64)
    row_base = np.zeros(B + 1, np.int64)
    for b in range(B):
        u = idx[b]
        n_nodes = node_offsets[u + 1] - node_offsets[u]
        node_base[b + 1] = node_base[b] + n_nodes
        row_base[b + 1] = row_base[b] + present_offsets[u + 1] - present_offsets[u] + (0 if share else n_nodes)
    item, node_inst, node_len, node_count, weight, absent_row = _batch_nodes(
        idx, node_base, row_base, n_history, node_offsets, node_item, node_present, present_offsets
    )
    if share:
        P = row_base[B]
        owner, shared, sums = _shared_absent(self_w[idx], item, node_inst, weight)
        absent_row = P + shared
        R = P + len(owner)
    else:
        owner, sums, R = np.arange(len(item)), weight.astype(np.float64), row_base[B]
    row_node = np.empty(R, np.int64)
    row_weight = np.ones(R, np.float32)
    row_present = np.zeros(R, np.bool_)
    row_scale = np.empty(R, self_w.dtype)
    row_self = np.ones(R, np.float32)
    for m in range(len(item)):
        row_scale[absent_row[m]] = self_w[idx[node_inst[m]]]
    for k in range(len(owner)):
        row_node[absent_row[owner[k]]] = owner[k]
        row_weight[absent_row[owner[k]]] = np.float32(sums[k])
    node_last, node_rows, node_times = _present_rows(
        idx, node_base, row_base, node_offsets, node_present, present_offsets, present_node, present_t, self_w,
        row_node, row_present, row_scale, row_self,
    )  # fmt: skip
    out_row, out_slot, num_slots = _shifted_pairs(idx, row_base, pair_offsets, pair_row, pair_slot, slot_offsets)
    return (
        out_row, out_slot, num_slots, row_scale, row_self,
        row_node, row_weight, row_present, item, node_inst, node_len, node_count, node_last, node_rows, node_times,
        absent_row,
    )  # fmt: skip


@numba.njit(**_JIT, inline="always")
def _batch_nodes(idx, node_base, row_base, n_history, node_offsets, node_item, node_present, present_offsets):  # pragma: no cover - jit
    """The batch's nodes: item, instance, history length, purchases, absent multiplicity
    (float32(T - purchases)) and the absent row of the per-node layout (after the instance's
    present rows). Shapes: -> [M] each."""
    M = node_base[-1]
    item, node_inst, node_len, node_count = np.empty(M, np.int64), np.empty(M, np.int64), np.empty(M, np.int64), np.empty(M, np.int64)
    weight = np.empty(M, np.float32)
    absent_row = np.empty(M, np.int64)
    for b in range(len(idx)):
        u = idx[b]
        first_absent = row_base[b] + present_offsets[u + 1] - present_offsets[u]
        for j in range(node_offsets[u + 1] - node_offsets[u]):
            m, v = node_base[b] + j, node_offsets[u] + j
            item[m] = node_item[v]
            node_inst[m] = b
            node_len[m] = n_history[u]
            node_count[m] = node_present[v]
            weight[m] = np.float32(n_history[u] - node_present[v])
            absent_row[m] = first_absent + j
    return item, node_inst, node_len, node_count, weight, absent_row


@numba.njit(**_JIT, inline="always")
def _shared_absent(inst_w, item, node_inst, weight):  # pragma: no cover - jit
    """The shared absent rows: the first node of each distinct (item, self weight) in
    ascending order, each node's pair, and each pair's multiplicity (float64 sums in node
    order). Shapes: inst_w [B]; item, node_inst, weight [M] -> ([U], [M], [U])."""
    distinct_w = np.unique(inst_w)
    code = np.searchsorted(distinct_w, inst_w)  # [B] each instance's self weight's rank
    n_major = 0
    for m in range(len(item)):
        n_major = max(n_major, item[m] + 1)
    owner, shared = unique_pairs(item, code[node_inst], n_major, max(len(distinct_w), 1))
    sums = np.zeros(len(owner), np.float64)
    for m in range(len(item)):
        sums[shared[m]] += weight[m]
    return owner, shared, sums


@numba.njit(**_JIT, inline="always")
def _present_rows(
    idx, node_base, row_base, node_offsets, node_present, present_offsets, present_node, present_t, self_w,
    row_node, row_present, row_scale, row_self,
):  # pragma: no cover - jit
    """The present rows' node, presence, self weight and self coefficient 1 - purchases, in
    place; returns each node's latest purchase [M] and its present rows and times node by node
    (time order within a node) [P_b]."""
    P = 0
    for b in range(len(idx)):
        P += present_offsets[idx[b] + 1] - present_offsets[idx[b]]
    p_node, p_row, p_t = np.empty(P, np.int64), np.empty(P, np.int64), np.empty(P, np.int64)
    node_last = np.zeros(node_base[-1], np.int64)
    at = 0
    for b in range(len(idx)):
        u = idx[b]
        for j in range(present_offsets[u + 1] - present_offsets[u]):
            e, r = present_offsets[u] + j, row_base[b] + j
            m = node_base[b] + present_node[e]
            p_node[at], p_row[at], p_t[at] = m, r, present_t[e]
            row_scale[r] = self_w[u]
            row_node[r] = m
            row_present[r] = True
            row_self[r] = np.float32(1.0 - node_present[node_offsets[u] + present_node[e]])
            node_last[m] = max(node_last[m], present_t[e])
            at += 1
    by_node = stable_order(p_node, len(node_last))
    return node_last, p_row[by_node], p_t[by_node]


@numba.njit(**_JIT, inline="always")
def _shifted_pairs(idx, row_base, pair_offsets, pair_row, pair_slot, slot_offsets):  # pragma: no cover - jit
    """The factored adjacency's entries of the batch's instances, shifted to the batch's rows
    and slots; returns them and the number of slots. Shapes: -> ([F_b], [F_b], int)."""
    F = 0
    for b in range(len(idx)):
        F += pair_offsets[idx[b] + 1] - pair_offsets[idx[b]]
    out_row, out_slot = np.empty(F, np.int64), np.empty(F, np.int64)
    at = slot_base = 0
    for b in range(len(idx)):
        u = idx[b]
        for q in range(pair_offsets[u], pair_offsets[u + 1]):
            out_row[at] = pair_row[q] + row_base[b]
            out_slot[at] = pair_slot[q] + slot_base
            at += 1
        slot_base += slot_offsets[u + 1] - slot_offsets[u]
    return out_row, out_slot, slot_base


@numba.njit(**_JIT)
def node_subset(nodes, node_count):  # pragma: no cover - jit
    """The places in a batch's node_rows of the present rows of the nodes ``nodes`` (ascending
    places), node by node: :class:`~basketgnn.graph.attention_plan.NodeSubset`'s gather.

    Shapes: nodes [M']; node_count [M] -> [P'] int64."""
    offsets = np.zeros(len(node_count) + 1, np.int64)
    for m in range(len(node_count)):
        offsets[m + 1] = offsets[m] + node_count[m]
    n_present = 0
    for m in nodes:
        n_present += node_count[m]
    present = np.empty(n_present, np.int64)
    j = 0
    for m in nodes:
        for e in range(offsets[m], offsets[m + 1]):
            present[j] = e
            j += 1
    return present


@numba.njit(**_JIT)
def entries_in(row, item, wanted, n_items):  # pragma: no cover - jit
    """The places m (ascending) of the entries (row[m], item[m]) with item[m] among
    wanted[row[m]]: the entries grouped by row (a counting sort), each row's wanted items
    marked in a catalogue-wide stamp, its entries looked up there.

    Shapes: row, item [M] int64; wanted [B, C] int64 -> [M'] int64."""
    B, C = wanted.shape
    M = len(row)
    start = np.zeros(B + 1, np.int64)
    for m in range(M):
        start[row[m] + 1] += 1
    for b in range(B):
        start[b + 1] += start[b]
    fill = start[:-1].copy()
    by_row = np.empty(M, np.int64)
    for m in range(M):
        by_row[fill[row[m]]] = m
        fill[row[m]] += 1
    stamp = np.full(n_items, -1, np.int64)
    keep = np.zeros(M, np.bool_)
    for b in range(B):
        for c in range(C):
            stamp[wanted[b, c]] = b
        for j in range(start[b], start[b + 1]):
            m = by_row[j]
            keep[m] = stamp[item[m]] == b
    return np.flatnonzero(keep)
