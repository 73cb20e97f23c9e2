"""Per-user temporal co-occurrence graphs (DNNTSP's first step), built for all users at once.

For an instance (user u, history of T baskets S_0 .. S_{T-1}), DNNTSP's graph has a
node-timestamp (i, t) for every distinct history item i (N of them) and every t < T, with

- c(i, j), i != j: number of history baskets holding both; c(i, i) = 1; w = c / max(c)
  over the user (the max includes the self weight 1);
- edges at t: (i, t) -> (j, t) with weight w(i, j) for i != j both in S_t, and a self-loop
  with weight w(i, i) = 1 / max(c) on every node-timestamp.

**Distinct rows.** When i is *not* in S_t, node-timestamp (i, t) has only its self-loop, and
its input is E_i at every t; so through every GCN layer all of i's absent timestamps carry the
same value. We therefore store, per user, one row per *present* node-timestamp (i in S_t) plus
one *absent* row per node, with a multiplicity (how many node-timestamps it stands for:
1, or T minus the number of baskets holding i). BatchNorm weights rows by multiplicity, so
statistics equal those over all N * T node-timestamps, and ``seq_row`` expands rows back to the
full [node, T] sequences for attention. This is exact, and the GCN runs on far fewer rows
wherever items are bought in few of a history's baskets. An absent row's value depends only on
its item and its user's 1 / max c, so scoring batches go one step further and give all nodes
with both equal one absent row (``share_absent``, :meth:`UserGraphs.collate`).

Worked example: baskets {a, b}, {b}, T = 2, nodes a=0, b=1. Present rows: 0=(a,0), 1=(b,0),
2=(b,1); absent rows: 3=a (multiplicity 1: t=1), 4=b (multiplicity 0). Edges: 0->1, 1->0
(weight c/max = 1/1), self-loops on rows 0..4 (weight 1). seq_row = [[0, 3], [1, 2]].

**Factored form** (``form="factored"``, the default). With B the incidence of slots and rows
(slot = a pair of the user's baskets (t, s) sharing an item; B[(t, s), (i, t)] = 1 iff i is in
S_s), (B^T B)[(j, t), (i, t)] = c(i, j) for i != j and n_j (baskets holding j) for i = j, and
rows of different timestamps never meet. So the whole weighted convolution input is

    agg = (B^T (B x) + (1 - n_r) x) / max c        (n_r = n_j on present rows, 0 on absent ones)

with one entry of B per (node i, t, s), i in S_t and S_s: sum_i n_i^2 per user instead of the
sum_t |S_t|^2 co-occurrence edges. A basket of 500 items bought once each costs 500 entries
rather than 250,000 edges.
``max c`` is needed exactly: a pair with c >= 2 joins two items each bought at least twice, so
only those items' pairs are enumerated. ``form="edges"`` keeps the explicit weighted DGL graph
(the dense reference of the tests).

Memory is O(sum |S_t|^2 + N) per user with edges, O(sum_i n_i^2 + N) factored. The factored
form comes from a compiled kernel (customer by customer, :mod:`basketgnn.graph.build_kernel`);
the edge form and the kernel's reference are vectorised NumPy over all instances (no loop over
users or item pairs). :meth:`UserGraphs.collate` cuts out a batch as one DGL graph.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from basketgnn.data.dataset import BasketData, _offsets, ranges
from basketgnn.data.split import Instances
from basketgnn.graph import build_kernel
from basketgnn.graph.attention_plan import AttentionBucket, plan_buckets
from basketgnn.graph.collate_kernel import (
    BATCH_FIELDS,
    collate_factored,
    stable_order,
    unique_pairs,
)

if TYPE_CHECKING:
    import dgl


def dgl_module() -> Any:
    """DGL, imported when the explicit edge form is first built. The factored form (the
    default) never calls DGL, so the model also runs where DGL's CPU-only build cannot be
    installed beside the torch in use (a CUDA machine with a newer torch)."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl
    import dgl.function  # noqa: F401  (the message and reduce functions of the edge form)

    return dgl


@dataclass(frozen=True)
class FactoredAdjacency:
    """The co-occurrence weights of a batch as ``(B^T B + diag(self_term)) * scale`` (module
    docstring): entry q of B links row ``pair_row[q]`` to slot ``pair_slot[q]``.

    Shapes: pair_row, pair_slot [Q]; row_scale [R] (1 / max c of the row's user);
    row_self [R] (1 - n_r).
    """

    pair_row: torch.Tensor
    pair_slot: torch.Tensor
    num_slots: int
    row_scale: torch.Tensor
    row_self: torch.Tensor

    def to(self, device: torch.device | str) -> FactoredAdjacency:
        return FactoredAdjacency(
            self.pair_row.to(device), self.pair_slot.to(device), self.num_slots,
            self.row_scale.to(device), self.row_self.to(device),
        )  # fmt: skip


@dataclass(frozen=True)
class GraphBatch:
    """A batch of B users' graphs merged into one DGL graph over distinct rows.

    Shapes (R = rows, M = user-nodes in the batch, T = longest history in the batch):
    graph: R nodes, edata["w"] [E] (co-occurrence and self-loop weights), with form="edges";
    adjacency: the same weights factored (:class:`FactoredAdjacency`), with form="factored";
    row_node [R] user-node of each row; row_weight [R] float multiplicity;
    row_present [R] bool (a present node-timestamp, not an absent row);
    seq_row [M, T] the row holding node m at timestamp t (padding: the node's absent row);
    node_item [M] catalogue item; node_user [M] batch row; node_len [M] its user's T;
    node_count [M] baskets holding the item; node_last [M] last timestamp it was bought;
    user_len [B]; target_items [nnz] / target_offsets [B + 1] when known;
    node_rows [P_b]: each node's present rows, node by node, in time order (node m's are
    ``node_rows[o_m : o_m + node_count[m]]``, o = offsets of node_count), node_times [P_b] their
    timestamps, absent_row [M] each node's absent row: the attention plan of a node, read by
    the compiled attention (``nn.attention_kernel``); :attr:`attention` groups the same plan
    into buckets for the tensor path (built on first use).
    """

    graph: dgl.DGLGraph | None
    row_node: torch.Tensor
    row_weight: torch.Tensor
    row_present: torch.Tensor
    node_item: torch.Tensor
    node_user: torch.Tensor
    node_len: torch.Tensor
    node_count: torch.Tensor
    node_last: torch.Tensor
    user_len: torch.Tensor
    node_rows: torch.Tensor
    node_times: torch.Tensor
    absent_row: torch.Tensor
    target_items: torch.Tensor | None = None
    target_offsets: torch.Tensor | None = None
    adjacency: FactoredAdjacency | None = None

    @property
    def num_rows(self) -> int:
        return len(self.row_node)

    @property
    def batch_size(self) -> int:
        return len(self.user_len)

    @property
    def max_len(self) -> int:
        return int(self.user_len.max()) if len(self.user_len) else 0

    @cached_property
    def seq_row(self) -> torch.Tensor:
        """[M, T] the row holding node m at timestamp t, padding the node's absent row: the
        attention plan written out (built on first use; the compiled kernels read the plan
        itself, and only the tensor path's sequences, the membership features and the
        explanations read this)."""
        seq = self.absent_row[:, None].repeat(1, self.max_len)  # [M, T]
        node = torch.repeat_interleave(torch.arange(len(self.absent_row), device=seq.device), self.node_count)
        seq[node, self.node_times] = self.node_rows
        return seq

    @cached_property
    def attention(self) -> tuple[AttentionBucket, ...]:
        """The nodes' attention plan as buckets of nodes with similar D (built once, on the CPU,
        then moved to the batch's device: :func:`~basketgnn.graph.attention_plan.plan_buckets`)."""
        return plan_buckets(self)

    def to(self, device: torch.device | str) -> GraphBatch:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in values.items()}
        moved["graph"] = None if self.graph is None else self.graph.to(device)
        moved["adjacency"] = None if self.adjacency is None else self.adjacency.to(device)
        batch = GraphBatch(**moved)
        if torch.device(device).type != "cpu" and self.node_rows.device.type == "cpu":
            # Only the tensor path runs off the CPU: its buckets, built here from the CPU
            # arrays, go with the batch (not built later from device tensors copied back).
            batch.__dict__["attention"] = tuple(b.to(device) for b in self.attention)
        return batch


@dataclass(frozen=True)
class UserGraphs:
    """The graphs of a set of instances, in flat arrays (instance k's slice by the offsets).

    Shapes (n instances, M nodes, P present node-timestamps, Q co-occurrence edges):
    n_history [n] (T, after any ``max_history`` / ``max_history_items`` cap); node_offsets [n + 1]; node_item [M]; node_present [M] (baskets holding
    the node); present_offsets [n + 1]; present_node [P] (local node), present_t [P];
    edge_offsets [n + 1]; edge_src, edge_dst [Q] (local present-row ids); edge_w [Q];
    self_w [n] (1 / max c); target_items / target_offsets (the target baskets, when known);
    left_out_baskets: history baskets beyond either cap that the graphs leave out;
    share_absent: :meth:`collate` gives the nodes of one item whose users share ``self_w`` one
    absent row (see there).
    Factored form (edge_* empty): pair_offsets [n + 1]; pair_row [F] (local present row),
    pair_slot [F] (local slot); slot_offsets [n + 1] (slots per instance).
    """

    n_history: np.ndarray
    node_offsets: np.ndarray
    node_item: np.ndarray
    node_present: np.ndarray
    present_offsets: np.ndarray
    present_node: np.ndarray
    present_t: np.ndarray
    edge_offsets: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_w: np.ndarray
    self_w: np.ndarray
    target_items: np.ndarray | None
    target_offsets: np.ndarray | None
    form: str = "edges"
    pair_offsets: np.ndarray | None = None
    pair_row: np.ndarray | None = None
    pair_slot: np.ndarray | None = None
    slot_offsets: np.ndarray | None = None
    left_out_baskets: int = 0
    share_absent: bool = False

    def __len__(self) -> int:
        return len(self.n_history)

    @property
    def n_nodes(self) -> np.ndarray:
        return np.diff(self.node_offsets)

    @property
    def n_present(self) -> np.ndarray:
        return np.diff(self.present_offsets)

    @property
    def lengths(self) -> np.ndarray:
        """History lengths [n], by which the engine buckets instances into batches."""
        return self.n_history

    @property
    def sizes(self) -> np.ndarray:
        """Nodes per instance [n]: a batch's work is its nodes times its longest history
        (the [M, T] sequences and attention plans), which the engine bounds (``batch_work``)."""
        return self.n_nodes

    def _targets(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        """The target baskets of instances ``idx`` as GraphBatch fields ({} when unknown)."""
        if self.target_items is None or self.target_offsets is None:
            return {}
        lens = self.target_offsets[idx + 1] - self.target_offsets[idx]
        items = self.target_items[ranges(self.target_offsets[idx], lens)].astype(np.int64)
        return {"target_items": torch.from_numpy(items), "target_offsets": torch.from_numpy(_offsets(lens))}

    def collate(self, idx: np.ndarray, with_targets: bool = True, compiled: bool = True) -> GraphBatch:
        """Merge the graphs of instances ``idx`` into one :class:`GraphBatch` (vectorised; the
        factored form by a compiled kernel unless ``compiled`` is False: the same arrays).

        Rows of instance b are its present rows, then its absent rows, at offset row_base[b].
        With ``share_absent``, the present rows of all instances come first and then one absent
        row per distinct (item, self weight) of the batch's nodes: an absent row's input is
        E_i, its only weight its self-loop 1 / max c, so through every layer its value depends
        on the item and that weight alone, and nodes with both equal read the same row. Its
        multiplicity is the sum of theirs (BatchNorm's statistics are unchanged); the rows a
        scoring pass computes drop by the nodes that share.
        """
        idx = np.asarray(idx, dtype=np.int64)
        if compiled and self.form != "edges":
            return self._collate_compiled(idx, with_targets)
        B = len(idx)
        T = self.n_history[idx]  # [B]
        n_nodes = self.n_nodes[idx]  # [B]
        n_present = self.n_present[idx]  # [B]
        node_base = _offsets(n_nodes)  # [B + 1]
        M = int(node_base[-1])
        node_inst = np.repeat(np.arange(B), n_nodes)  # [M]
        nodes = ranges(self.node_offsets[idx], n_nodes)  # [M] global node ids
        absent_weight = (T[node_inst] - self.node_present[nodes]).astype(np.float32)  # [M]
        R, row_base, absent_row, absent_node, absent_weight = _absent_layout(
            self.node_item[nodes], self.self_w[idx], node_inst, n_present, n_nodes, absent_weight, self.share_absent
        )  # fmt: skip
        row_scale = np.empty(R, dtype=self.self_w.dtype)  # [R] each row's self weight 1 / max c
        row_scale[absent_row] = self.self_w[idx][node_inst]

        p = ranges(self.present_offsets[idx], n_present)  # [P_b] global present ids
        p_inst = np.repeat(np.arange(B), n_present)
        p_row = row_base[:-1][p_inst] + (np.arange(len(p)) - _offsets(n_present)[:-1][p_inst])
        p_node = node_base[:-1][p_inst] + self.present_node[p]
        row_scale[p_row] = self.self_w[idx][p_inst]

        row_node = np.empty(R, dtype=np.int64)
        row_node[p_row] = p_node
        row_node[absent_row[absent_node]] = absent_node
        row_weight = np.ones(R, dtype=np.float32)
        row_weight[absent_row[absent_node]] = absent_weight
        row_present = np.zeros(R, dtype=bool)
        row_present[p_row] = True
        p_t = self.present_t[p]  # [P_b]
        node_last = np.zeros(M, dtype=np.int64)
        np.maximum.at(node_last, p_node, p_t)
        # Present rows node by node; an instance's entries are in time order, so a stable sort
        # keeps each node's in time order.
        by_node = stable_order(np.asarray(p_node, np.int64), M)  # [P_b]

        graph, adjacency = None, None
        if self.form == "edges":
            n_edges = self.edge_offsets[idx + 1] - self.edge_offsets[idx]
            e = ranges(self.edge_offsets[idx], n_edges)
            shift = np.repeat(row_base[:-1], n_edges)  # present rows start at row_base
            self_loops = np.arange(R, dtype=np.int64)
            src = np.concatenate([self.edge_src[e] + shift, self_loops])
            dst = np.concatenate([self.edge_dst[e] + shift, self_loops])
            w = np.concatenate([self.edge_w[e], row_scale])
            graph = dgl_module().graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=R)
            graph.edata["w"] = torch.from_numpy(w.astype(np.float32))
        else:
            assert self.pair_offsets is not None and self.pair_row is not None
            assert self.pair_slot is not None and self.slot_offsets is not None
            n_pairs = self.pair_offsets[idx + 1] - self.pair_offsets[idx]
            n_slots = self.slot_offsets[idx + 1] - self.slot_offsets[idx]
            q = ranges(self.pair_offsets[idx], n_pairs)
            slot_base = _offsets(n_slots)
            row_self = np.ones(R, dtype=np.float32)
            row_self[p_row] = 1.0 - self.node_present[nodes][p_node]
            adjacency = FactoredAdjacency(
                pair_row=torch.from_numpy(self.pair_row[q] + np.repeat(row_base[:-1], n_pairs)),
                pair_slot=torch.from_numpy(self.pair_slot[q] + np.repeat(slot_base[:-1], n_pairs)),
                num_slots=int(slot_base[-1]),
                row_scale=torch.from_numpy(row_scale),
                row_self=torch.from_numpy(row_self),
            )

        targets = self._targets(idx) if with_targets else {}
        return GraphBatch(
            graph=graph,
            adjacency=adjacency,
            row_node=torch.from_numpy(row_node),
            row_weight=torch.from_numpy(row_weight),
            row_present=torch.from_numpy(row_present),
            node_item=torch.from_numpy(self.node_item[nodes].astype(np.int64)),
            node_user=torch.from_numpy(node_inst),
            node_len=torch.from_numpy(T[node_inst]),
            node_count=torch.from_numpy(self.node_present[nodes].astype(np.int64)),
            node_last=torch.from_numpy(node_last),
            user_len=torch.from_numpy(T.copy()),
            node_rows=torch.from_numpy(p_row[by_node]),
            node_times=torch.from_numpy(p_t[by_node]),
            absent_row=torch.from_numpy(absent_row),
            **targets,
        )

    def _collate_compiled(self, idx: np.ndarray, with_targets: bool) -> GraphBatch:
        """:meth:`collate` of the factored form by :func:`~basketgnn.graph.collate_kernel.collate_factored`."""
        out = collate_factored(
            idx, self.n_history, self.node_offsets, self.node_item, self.node_present, self.present_offsets,
            self.present_node, self.present_t, self.self_w, self.pair_offsets, self.pair_row, self.pair_slot,
            self.slot_offsets, self.share_absent,
        )  # fmt: skip
        t = torch.from_numpy
        adjacency = FactoredAdjacency(t(out[0]), t(out[1]), int(out[2]), t(out[3]), t(out[4]))
        targets = self._targets(idx) if with_targets else {}
        fields = dict(zip(BATCH_FIELDS, map(t, out[5:])), user_len=t(self.n_history[idx]), **targets)
        return GraphBatch(graph=None, adjacency=adjacency, **fields)


def _absent_layout(
    node_item: np.ndarray,
    self_w: np.ndarray,
    node_inst: np.ndarray,
    n_present: np.ndarray,
    n_nodes: np.ndarray,
    weight: np.ndarray,
    share: bool,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where a batch's rows go (:meth:`UserGraphs.collate`): the number of rows, each
    instance's first row, each node's absent row, one node standing for each absent row, and
    each absent row's multiplicity. Per node: instance b's present rows, then its absent rows,
    from row_base[b].
    Shared: all present rows, then one absent row per distinct (item, self weight), in
    ascending order of (item, self weight), multiplicities summed.

    Shapes: node_item, node_inst, weight [M] (each node's absent multiplicity); self_w,
    n_present, n_nodes [B] -> (R, row_base [B + 1], absent_row [M], absent_node [U],
    absent_weight [U]); U = M per node.
    """
    if share:
        row_base = _offsets(n_present)  # [B + 1]: present rows only
        _, w_code = np.unique(self_w, return_inverse=True)  # [B]
        item = node_item.astype(np.int64)  # [M]
        owner, shared = unique_pairs(
            item, w_code.reshape(-1)[node_inst].astype(np.int64), int(item.max(initial=-1)) + 1, int(w_code.max(initial=0)) + 1
        )  # [U] first node of each distinct (item, self weight), ascending; [M] each node's pair
        P = int(row_base[-1])
        return P + len(owner), row_base, P + shared, owner, np.bincount(shared, weights=weight, minlength=len(owner))
    row_base = _offsets(n_present + n_nodes)  # [B + 1]
    node_base = _offsets(n_nodes)
    local = np.arange(len(node_inst)) - node_base[:-1][node_inst]  # [M] node index within its instance
    absent_row = row_base[:-1][node_inst] + n_present[node_inst] + local  # [M]
    return int(row_base[-1]), row_base, absent_row, np.arange(len(node_inst)), weight


def _last_baskets_within(
    data: BasketData, users: np.ndarray, full_T: np.ndarray, T: np.ndarray, max_items: int
) -> np.ndarray:
    """Per instance, how many of the last ``T`` history baskets (of ``full_T``) hold at most
    ``max_items`` items together, counting back from the last one; at least 1 where T > 0.

    Shapes: users, full_T, T [n] -> [n].
    """
    sizes = data.histories(users, T, first=full_T - T).baskets.lengths.astype(np.int64)  # [sum T]
    inst = np.repeat(np.arange(len(T), dtype=np.int64), T)  # [sum T]
    # Items from each basket to the end of all histories, then to the end of its own.
    suffix = np.append(np.cumsum(sizes[::-1])[::-1], 0)  # [sum T + 1]
    from_here = suffix[:-1] - suffix[_offsets(T)[1:][inst]]  # [sum T]
    kept = np.bincount(inst[from_here <= max_items], minlength=len(T))  # [n]
    return np.minimum(T, np.maximum(kept, 1))


def build_user_graphs(
    data: BasketData,
    instances: Instances,
    with_targets: bool = True,
    form: str = "factored",
    max_history: int = 0,
    max_history_items: int = 0,
    compiled: bool = True,
    share_absent: bool = False,
) -> UserGraphs:
    """Build the co-occurrence graphs of every instance's history, vectorised over instances.

    ``form``: "factored" (B^T B, see the module docstring; what training and scoring use) or
    "edges" (the explicit weighted edge list; the tests' reference). ``max_history`` > 0: each
    graph holds only the last ``max_history`` baskets of the history (the target is still the
    basket after the whole history); the number left out is ``left_out_baskets``.
    ``max_history_items`` > 0: of those, only the latest whole baskets holding at most that
    many items together (always at least the last basket); left-out baskets are counted with
    the others. ``compiled``: the factored form's nodes, max c and entries of B come from
    :func:`basketgnn.graph.build_kernel.factored_graphs` (customer by customer, the same
    arrays); False: from the sorts of :func:`_sorted_graphs` (the tests' reference for it).
    ``share_absent``: batches share absent rows across their users (:meth:`UserGraphs.collate`).
    """
    if form not in ("factored", "edges"):
        raise ValueError(f"unknown graph form {form!r}")
    full_T = np.asarray(instances.n_history, dtype=np.int64)  # [n]
    T = np.minimum(full_T, max_history) if max_history > 0 else full_T  # [n]
    if max_history_items > 0:
        T = _last_baskets_within(data, instances.users, full_T, T, max_history_items)
    entries = _HistoryEntries.of(data, instances.users, full_T, T)
    targets = data.targets(instances.users, full_T) if with_targets else None
    common = {
        "n_history": T,
        "present_offsets": entries.present_offsets,
        "present_t": entries.basket_t[entries.basket],
        "target_items": None if targets is None else targets.values,
        "target_offsets": None if targets is None else targets.offsets,
        "form": form,
        "left_out_baskets": int((full_T - T).sum()),
        "share_absent": share_absent,
    }
    if form == "factored" and compiled:
        return _compiled_graphs(entries, data.n_items, common)
    return _sorted_graphs(entries, data.n_items, form, common)


@dataclass(frozen=True)
class _HistoryEntries:
    """The entries (present node-timestamps) of every instance's graph history, grouped by
    instance, basket by basket.

    Shapes (n instances, n_hb history baskets, nnz entries): T [n]; basket_t [n_hb] each
    basket's timestamp within its history; basket, inst, item [nnz] each entry's history
    basket, instance and item; present_offsets [n + 1].
    """

    T: np.ndarray
    basket_t: np.ndarray
    basket: np.ndarray
    inst: np.ndarray
    item: np.ndarray
    present_offsets: np.ndarray

    @classmethod
    def of(cls, data: BasketData, users: np.ndarray, full_T: np.ndarray, T: np.ndarray) -> _HistoryEntries:
        """The entries of the last ``T`` of each user's first ``full_T`` baskets."""
        n = len(T)
        hist = data.histories(users, T, first=full_T - T)
        baskets = hist.baskets
        basket_inst = np.repeat(np.arange(n, dtype=np.int64), T)  # [n_hb]
        basket_t = np.arange(baskets.n_rows, dtype=np.int64) - hist.basket_offsets[:-1][basket_inst]
        entry_basket = baskets.row_ids()  # [nnz]
        entry_inst = basket_inst[entry_basket]
        present_offsets = _offsets(np.bincount(entry_inst, minlength=n))
        return cls(T, basket_t, entry_basket, entry_inst, baskets.values.astype(np.int64), present_offsets)


def _compiled_graphs(entries: _HistoryEntries, n_items: int, common: dict) -> UserGraphs:
    """The factored form from :func:`basketgnn.graph.build_kernel.factored_graphs`."""
    n = len(entries.T)
    node_key, entry_node, node_present, node_offsets, max_c, *b = build_kernel.factored_graphs(
        entries.present_offsets, entries.item, entries.basket_t[entries.basket], entries.T, n_items
    )
    node_local = np.arange(len(node_key), dtype=np.int64) - node_offsets[:-1][node_key // n_items]
    none = np.zeros(0, dtype=np.int64)
    return UserGraphs(
        node_offsets=node_offsets, node_item=(node_key % n_items).astype(np.int32),
        node_present=node_present, present_node=node_local[entry_node],
        edge_offsets=np.zeros(n + 1, dtype=np.int64), edge_src=none, edge_dst=none,
        edge_w=np.zeros(0, dtype=np.float32), self_w=1.0 / max_c,
        pair_offsets=b[0], pair_row=b[1], pair_slot=b[2], slot_offsets=b[3], **common,
    )  # fmt: skip


def _sorted_graphs(entries: _HistoryEntries, n_items: int, form: str, common: dict) -> UserGraphs:
    """Either form from sorts over all entries at once: nodes, the ordered pairs of entries of
    a basket (all of them for the edge list; for the factored form only those of items bought
    at least twice, enough for max c), c and max c, and the factored form's entries of B."""
    n, item = len(entries.T), entries.item
    entry_local = np.arange(len(item), dtype=np.int64) - entries.present_offsets[:-1][entries.inst]
    # Nodes: distinct (instance, item), sorted by instance then item.
    node_key, entry_node = np.unique(entries.inst * n_items + item, return_inverse=True)
    node_inst = node_key // n_items
    node_offsets = _offsets(np.bincount(node_inst, minlength=n))
    node_local = np.arange(len(node_key), dtype=np.int64) - node_offsets[:-1][node_inst]
    node_present = np.bincount(entry_node, minlength=len(node_key))  # [N] baskets holding it

    sel = np.arange(len(item), dtype=np.int64)
    if form == "factored":
        sel = sel[node_present[entry_node] >= 2]
    src_e, dst_e = _same_group_pairs(sel, entries.basket[sel])
    keep = src_e != dst_e
    src_e, dst_e = src_e[keep], dst_e[keep]
    pair_inst = entries.inst[src_e]
    # c(i, j) = number of baskets with both = occurrences of the (i, j) node pair.
    _, pair_group, pair_count = np.unique(
        entry_node[src_e] * len(node_key) + entry_node[dst_e],
        return_inverse=True,
        return_counts=True,
    )
    c = pair_count[pair_group].astype(np.float64)
    max_c = np.ones(n, dtype=np.float64)  # the self weight 1 takes part in the max
    np.maximum.at(max_c, pair_inst, c)

    factored: dict[str, np.ndarray] = {}
    if form == "factored":
        factored = _sorted_factored_entries(entries, entry_node, entry_local)
        src_e = dst_e = pair_inst = np.zeros(0, dtype=np.int64)
        c = np.zeros(0, dtype=np.float64)
    return UserGraphs(
        node_offsets=node_offsets,
        node_item=(node_key % n_items).astype(np.int32),
        node_present=node_present,
        present_node=node_local[entry_node],
        edge_offsets=_offsets(np.bincount(pair_inst, minlength=n)),
        edge_src=entry_local[src_e],
        edge_dst=entry_local[dst_e],
        edge_w=(c / max_c[pair_inst]).astype(np.float32),
        self_w=1.0 / max_c,
        **common,
        **factored,
    )


def _sorted_factored_entries(
    entries: _HistoryEntries, entry_node: np.ndarray, entry_local: np.ndarray
) -> dict[str, np.ndarray]:
    """One entry of B per (node i, t, s) with i in S_t and S_s: the pairs of entries of a node,
    instance by instance, each with its row and its slot's rank within the instance."""
    n = len(entries.T)
    a_e, b_e = _same_group_pairs(np.arange(len(entries.item), dtype=np.int64), entry_node)
    t_a, t_b = entries.basket_t[entries.basket[a_e]], entries.basket_t[entries.basket[b_e]]
    inst = entries.inst[a_e]
    span = int(entries.T.max(initial=0)) + 1
    slot_key, slot_of = np.unique((inst * span + t_a) * span + t_b, return_inverse=True)
    slot_offsets = _offsets(np.bincount(slot_key // span**2, minlength=n))
    pair_order = np.argsort(inst, kind="stable")
    return {
        "pair_offsets": _offsets(np.bincount(inst, minlength=n)),
        "pair_row": entry_local[a_e][pair_order],
        "pair_slot": (slot_of - slot_offsets[:-1][inst])[pair_order],
        "slot_offsets": slot_offsets,
    }


def _same_group_pairs(members: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (a, b) of ``members`` with the same ``group``, a = b included.

    Example: members [4, 5, 6], group [0, 0, 1] -> a [4, 4, 5, 5, 6], b [4, 5, 4, 5, 6].
    Shapes: members [m], group [m] -> a, b [sum over groups of size^2].
    """
    order = np.argsort(group, kind="stable")
    members, group = members[order], group[order]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(group)])  # [groups]
    size = np.repeat(sizes, sizes)  # [m] size of each member's group
    start = np.repeat(starts, sizes)  # [m]
    a = np.repeat(members, size)
    b = members[ranges(start, size)]
    return a, b
