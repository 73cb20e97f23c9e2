"""The nodes' attention plan for the tensor path: nodes grouped by how often they were bought,
each group's distinct rows, query columns and log-counts (what
``GraphBatch.attention`` builds; the compiled kernels read the plan from the batch directly);
and some of a batch's nodes as a plan of their own (:class:`NodeSubset`), for scoring that
reads a few items of each customer."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

from basketgnn.data.dataset import _offsets
from basketgnn.graph.collate_kernel import node_subset


@dataclass(frozen=True)
class AttentionBucket:
    """Nodes bought a similar number of times, for attention over *distinct* rows.

    A node's sequence holds its P present rows and, at every other timestamp, its absent row.
    Causal attention at position t over keys t' <= t therefore equals attention over the
    node's D = P + 1 distinct rows, each key y weighted by how often it occurs up to t:
    ``softmax_y(s(q_t, k_y) + log c_t(y))`` (c_t = 0 -> log = -inf). Column 0 is the absent
    row; columns 1..P the present rows in time order; padding columns have c = 0.

    Example: T = 3, the item bought at t = 1 only: columns [absent, (t=1)];
    query column per t = [0, 1, 0]; c_t = [[1, 0], [1, 1], [2, 1]].

    Shapes (nodes in the bucket M_b, D distinct rows, T = batch T_max): nodes [M_b];
    rows [M_b, D] row ids; query [M_b, T] column of the query at t; log_count [M_b, T, D].
    """

    nodes: torch.Tensor
    rows: torch.Tensor
    query: torch.Tensor
    log_count: torch.Tensor

    def to(self, device: torch.device | str) -> AttentionBucket:
        return AttentionBucket(*(v.to(device) for v in self.__dict__.values()))


def attention_buckets(
    p_node: np.ndarray,
    p_t: np.ndarray,
    p_row: np.ndarray,
    absent_row: np.ndarray,
    n_present: np.ndarray,
    T_max: int,
) -> tuple[AttentionBucket, ...]:
    """Group nodes by P (1, 2, 3-4, 5-8, ...) and build each group's distinct-row plan.

    Shapes: p_* [P_b] per present row (batch node, time, row); absent_row [M]; n_present [M].
    """
    M = len(absent_row)
    if M == 0:
        return ()
    order = np.lexsort((p_t, p_node))  # present rows by node, then time
    p_node, p_t, p_row = p_node[order], p_t[order], p_row[order]
    col = 1 + np.arange(len(p_node)) - _offsets(n_present)[:-1][p_node]  # [P_b] column >= 1
    bucket_of = np.ceil(np.log2(np.maximum(n_present, 1))).astype(np.int64)  # [M]
    t_grid = np.arange(T_max)
    buckets = []
    for b in np.unique(bucket_of):
        nodes = np.flatnonzero(bucket_of == b)  # [M_b]
        local = np.full(M, -1, dtype=np.int64)
        local[nodes] = np.arange(len(nodes))
        D = int(n_present[nodes].max()) + 1
        sel = local[p_node] >= 0
        pn, pc, pt = local[p_node[sel]], col[sel], p_t[sel]
        rows = np.repeat(absent_row[nodes][:, None], D, axis=1)  # [M_b, D]
        rows[pn, pc] = p_row[sel]
        query = np.zeros((len(nodes), T_max), dtype=np.int64)  # [M_b, T]
        query[pn, pt] = pc
        key_time = np.full((len(nodes), D), T_max, dtype=np.int64)  # padding: never visible
        key_time[pn, pc] = pt
        visible = t_grid[None, :, None] >= key_time[:, None, :]  # [M_b, T, D]
        present_upto = np.zeros((len(nodes), T_max), dtype=np.int64)
        present_upto[pn, pt] = 1
        n_absent = (t_grid + 1)[None, :] - np.cumsum(present_upto, axis=1)  # [M_b, T] >= 0
        log_count = np.where(visible, 0.0, -np.inf)  # float64: exact log(n) for float64 models
        with np.errstate(divide="ignore"):
            log_count[:, :, 0] = np.log(n_absent)
        buckets.append(
            AttentionBucket(
                nodes=torch.from_numpy(nodes),
                rows=torch.from_numpy(rows),
                query=torch.from_numpy(query),
                log_count=torch.from_numpy(log_count),
            )
        )
    return tuple(buckets)


@dataclass(frozen=True)
class NodeSubset:
    """Some of a batch's nodes as an attention plan of their own (a ``NodePlan``) over the
    batch's rows: scoring that reads a few items per customer attends these nodes alone. The
    rows are still projected in one call over all of them (a row's rounding in a matrix product
    may depend on the call's shape), and a node's output reads its own rows only, so each kept
    node gets the bits the whole batch gives it.

    Shapes (M' kept nodes, P' their present rows): nodes [M'] (the kept nodes' places in the
    batch, ascending); absent_row, node_count, node_len [M']; node_rows, node_times [P'] (node
    by node, in time order, as the batch's; batch rows); max_len: the batch's T.
    """

    nodes: torch.Tensor
    absent_row: torch.Tensor
    node_count: torch.Tensor
    node_len: torch.Tensor
    node_rows: torch.Tensor
    node_times: torch.Tensor
    max_len: int

    @classmethod
    def of(cls, plan: Any, nodes: torch.Tensor) -> NodeSubset:
        """The nodes ``nodes`` (ascending places) of a batch's plan (a ``GraphBatch``): on the
        CPU in one compiled pass (:func:`~basketgnn.graph.collate_kernel.node_subset`), else
        as :meth:`of_tensors` builds it (the same plan)."""
        if nodes.device.type != "cpu":
            return cls.of_tensors(plan, nodes)
        present = node_subset(nodes.to(torch.int64).numpy(), plan.node_count.to(torch.int64).numpy())
        return cls._gathered(plan, nodes, torch.from_numpy(present))

    @classmethod
    def of_tensors(cls, plan: Any, nodes: torch.Tensor) -> NodeSubset:
        """:meth:`of` in tensor operations, on any device."""
        count = plan.node_count.to(torch.int64).index_select(0, nodes)  # [M']
        starts = (torch.cumsum(plan.node_count, 0) - plan.node_count).to(torch.int64).index_select(0, nodes)  # [M']
        owner = torch.repeat_interleave(torch.arange(len(nodes), device=nodes.device), count)  # [P']
        within = torch.arange(len(owner), device=nodes.device) - (torch.cumsum(count, 0) - count).index_select(0, owner)
        return cls._gathered(plan, nodes, starts.index_select(0, owner) + within)

    @classmethod
    def _gathered(cls, plan: Any, nodes: torch.Tensor, present: torch.Tensor) -> NodeSubset:
        """The subset from the places of its present rows in the batch's node_rows ([P'])."""
        def pick(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
            return x.index_select(0, at)

        return cls(nodes, pick(plan.absent_row, nodes), pick(plan.node_count, nodes), pick(plan.node_len, nodes),
                   pick(plan.node_rows, present), pick(plan.node_times, present), plan.max_len)  # fmt: skip

    @cached_property
    def attention(self) -> tuple[AttentionBucket, ...]:
        """The kept nodes' plan as buckets for the tensor path (:func:`plan_buckets`)."""
        return plan_buckets(self)


def plan_buckets(plan: Any) -> tuple[AttentionBucket, ...]:
    """A plan's nodes (a ``GraphBatch``'s or a :class:`NodeSubset`'s) as :func:`attention_buckets`
    of nodes with similar D, built on the CPU, then moved to the plan's device."""
    count = plan.node_count.cpu().numpy()
    buckets = attention_buckets(
        np.repeat(np.arange(len(count), dtype=np.int64), count), plan.node_times.cpu().numpy(),
        plan.node_rows.cpu().numpy(), plan.absent_row.cpu().numpy(), count, plan.max_len,
    )  # fmt: skip
    device = plan.node_rows.device
    return buckets if device.type == "cpu" else tuple(b.to(device) for b in buckets)
