"""Collaborative neighbour scores for DNNTSP (beyond the paper).

DNNTSP sees one customer at a time: nothing in MODEL.md tells it what *similar customers* buy,
which is where TIFU-KNN gets its edge on DC. This module adds that signal to the ranking.
For a customer with history vector v (TIFU's decayed repeat vector, see
:mod:`basketgnn.recommenders.tifu_knn`), let N_k be the k training customers nearest to v in
Euclidean distance (never the customer itself) and

    n_u = (1 / k) Σ_{c ∈ N_k} v_c          (the neighbour mean, as in TIFU-KNN)

Only each customer's ``top`` highest entries of n_u are kept, divided by the largest one, so
the kept values lie in (0, 1] and the customer's best neighbour item has 1. Items are then
ranked by

    sigmoid(y_{u,i}) + w · n_{u,i}

where y is DNNTSP's score (:func:`fuse_neighbours`). The model itself is unchanged and trained
(and its best epoch chosen) exactly as before; afterwards w and k are chosen on the validation
customers (``train.trainer.choose_neighbours``; DNNTSPConfig.neighbour_weight / neighbour_k,
"auto" or fixed), and the neighbour term changes the ranking from then on.

The *pool* is the training customers' vectors over their whole visible sequence (history and
target basket), exactly like TIFU-KNN's; it is stored in the checkpoint so `predict` and
`recommend` use the same neighbours as training did. Keeping ``top`` entries per customer makes
memory O(n · top) rather than O(n · I), which matters on large catalogues.

Shapes in this module: n query instances, P pool customers, I items.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from basketgnn.data.dataset import BasketData, _offsets
from basketgnn.data.split import Instances
from basketgnn.recommenders.tifu_knn import (
    NeighbourIndex,
    SparseRows,
    customer_vectors,
    query_chunks,
)


@dataclass(frozen=True)
class NeighbourScores:
    """Each instance's kept neighbour scores, as CSR rows.

    Shapes: offsets [n + 1] int64; items [nnz] int64; values [nnz] float32 in (0, 1].
    """

    offsets: np.ndarray
    items: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self, start: int, stop: int) -> NeighbourScores:
        """Instances start..stop-1 as their own NeighbourScores."""
        lo, hi = self.offsets[start], self.offsets[stop]
        return NeighbourScores(self.offsets[start : stop + 1] - lo, self.items[lo:hi], self.values[lo:hi])


class NeighbourPool:
    """The training customers' TIFU vectors, searchable for each query's nearest customers.

    Args:
        vectors: pool vectors, SparseRows [P, I].
        customer_ids: [P] original customer id of each pool row (a query is never its own
            neighbour: rows with the query's customer id are skipped).
        k: neighbours per query; m, r_b, r_g: TIFU group size and decays; top: entries kept
            per query.
    """

    def __init__(
        self,
        vectors: SparseRows,
        customer_ids: np.ndarray,
        k: int,
        m: int,
        r_b: float,
        r_g: float,
        top: int,
    ) -> None:
        self.vectors = vectors
        self.customer_ids = np.asarray(customer_ids).astype(str)
        self.k, self.m, self.r_b, self.r_g, self.top = int(k), int(m), float(r_b), float(r_g), int(top)
        # Integer code per distinct customer id, shared by pool rows and queries.
        self._ids, pool_codes = np.unique(self.customer_ids, return_inverse=True)
        self._index = NeighbourIndex(vectors, pool_codes.astype(np.int64), dtype=np.float32)

    @classmethod
    def build(
        cls,
        data: BasketData,
        train: Instances,
        k: int = 300,
        m: int = 3,
        r_b: float = 1.0,
        r_g: float = 0.7,
        top: int = 100,
    ) -> NeighbourPool:
        """The pool of ``train``'s customers, each over its history and target basket."""
        visible = data.histories(train.users, np.asarray(train.n_history) + 1)
        vectors = customer_vectors(visible, data.n_items, m, r_b, r_g)
        return cls(vectors, data.user_ids[train.users], k, m, r_b, r_g, top)

    def query_codes(self, customer_ids: np.ndarray) -> np.ndarray:
        """Pool code of each customer id, -1 when it is not in the pool. Shapes: [n] -> [n]."""
        ids = np.asarray(customer_ids).astype(str)
        if len(self._ids) == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self._ids, ids), 0, len(self._ids) - 1)
        found = self._ids[pos] == ids
        return np.where(found, pos, -1).astype(np.int64)

    def scores(self, data: BasketData, instances: Instances) -> NeighbourScores:
        """Kept neighbour scores of every instance, from its history baskets only; rows with
        the instance's own customer id (``data.user_ids``) are never its neighbours."""
        return self.scores_by_k(data, instances, (self.k,))[self.k]

    def scores_by_k(
        self, data: BasketData, instances: Instances, ks: tuple[int, ...]
    ) -> dict[int, NeighbourScores]:
        """:meth:`scores` for several neighbour counts at once: the nearest max(ks) pool rows
        are found once and each k averages its nearest prefix (as TIFU-KNN's tuning does)."""
        if data.n_items != self.vectors.n_cols:
            raise ValueError(f"pool has {self.vectors.n_cols} items but the data {data.n_items}")
        n = len(instances)
        own = customer_vectors(
            data.histories(instances.users, instances.n_history), data.n_items, self.m, self.r_b, self.r_g
        )
        codes = self.query_codes(data.user_ids[instances.users])
        top = min(self.top, data.n_items)
        lengths = {k: np.zeros(n, dtype=np.int64) for k in ks}
        items: dict[int, list[np.ndarray]] = {k: [] for k in ks}
        values: dict[int, list[np.ndarray]] = {k: [] for k in ks}
        for rows, _, nbrs in query_chunks(self._index, own, codes, max(ks)):
            for k in ks:
                mean = self._index.mean(nbrs[:, :k])  # [c, I] float32
                keep = _top_entries(mean, top) & (mean > 0)  # [c, I]
                peak = mean.max(axis=1, keepdims=True)  # [c, 1]
                r, i = np.nonzero(keep)  # row-major: each row's items ascending
                lengths[k][rows] = np.bincount(r, minlength=keep.shape[0])
                items[k].append(i)
                values[k].append((mean[r, i] / peak[r, 0]).astype(np.float32))
        return {
            k: NeighbourScores(
                _offsets(lengths[k]),
                np.concatenate(items[k]) if items[k] else np.zeros(0, np.int64),
                np.concatenate(values[k]) if values[k] else np.zeros(0, np.float32),
            )
            for k in ks
        }

    def with_k(self, k: int) -> NeighbourPool:
        """The same pool averaging ``k`` neighbours."""
        out = copy.copy(self)
        out.k = int(k)
        return out

    def state(self) -> dict[str, Any]:
        """Plain arrays and numbers for a checkpoint (see :meth:`from_state`)."""
        v = self.vectors
        return {
            "indptr": v.indptr, "indices": v.indices, "values": v.values, "n_items": v.n_cols,
            "customer_ids": self.customer_ids.tolist(),
            "k": self.k, "m": self.m, "r_b": self.r_b, "r_g": self.r_g, "top": self.top,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NeighbourPool:
        vectors = SparseRows(
            np.asarray(state["indptr"]), np.asarray(state["indices"]),
            np.asarray(state["values"]), int(state["n_items"]),
        )
        return cls(
            vectors, np.asarray(state["customer_ids"], dtype=str),
            state["k"], state["m"], state["r_b"], state["r_g"], state["top"],
        )



def _top_entries(x: np.ndarray, top: int) -> np.ndarray:
    """Mask of each row's ``top`` largest entries; ties at the cut go to the lower column.

    Shapes: x [c, I] -> [c, I] bool with exactly min(top, I) True per row.
    """
    if top >= x.shape[1]:
        return np.ones(x.shape, dtype=bool)
    cut = torch.topk(torch.from_numpy(x), top, dim=1).values[:, -1:].numpy()  # [c, 1] top-th value
    keep = x > cut
    equal = x == cut  # [c, I]; at least `room` entries per row
    room = top - keep.sum(axis=1)  # [c] places left for entries equal to the cut
    keep |= equal
    # Only rows with more entries equal to the cut than places need the lowest-column rule.
    crowded = np.flatnonzero(equal.sum(axis=1) > room)
    if len(crowded):
        fill = equal[crowded] & (np.cumsum(equal[crowded], axis=1) <= room[crowded, None])
        keep[crowded] = (x[crowded] > cut[crowded]) | fill
    return keep


def fuse_neighbours(logits: np.ndarray, neighbours: NeighbourScores, weight: float) -> np.ndarray:
    """The ranking score sigmoid(y) + weight · n of every item (n = 0 where not kept).

    The neighbour signal is added to the *probability*, not the logit: it then mostly reorders
    the uncertain candidates (often items the customer never bought) and seldom overturns a
    confident repeat purchase. Computed and returned in float64: in float32 every logit above
    ~16.6 would give exactly 1.0, and confident items would lose their order.

    Shapes: logits [n, I], neighbours of n instances -> [n, I] float64.
    """
    if len(neighbours) != len(logits):
        raise ValueError(f"neighbour scores for {len(neighbours)} instances, logits for {len(logits)}")
    out = torch.sigmoid(torch.from_numpy(np.asarray(logits, dtype=np.float64))).numpy()
    rows = np.repeat(np.arange(len(neighbours)), np.diff(neighbours.offsets))
    out[rows, neighbours.items] += weight * neighbours.values  # (row, item) pairs are distinct
    return out
