"""The nodes' attention plan for the tensor path: nodes grouped by how often they were bought,
each group's distinct rows, query columns and log-counts (what
``GraphBatch.attention`` builds; the compiled kernels read the plan from the batch directly)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from basketgnn.data.dataset import _offsets


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
