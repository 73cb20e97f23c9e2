"""Collaborative neighbour scores for DNNTSP (beyond the paper; ``fusion: neighbours``).

The default is now the fusion with TIFU-KNN's whole score (:mod:`basketgnn.scoring.fusion`);
this term stays for configs that ask for it and for checkpoints written with it.

DNNTSP sees one customer at a time: nothing in MODEL.md tells it what *similar customers* buy,
which is where TIFU-KNN gets its edge on DC. This module adds that signal to the ranking.
For a customer with history vector v (TIFU's decayed repeat vector, see
:mod:`basketgnn.scoring.tifu`), let N_k be the k training customers nearest to v in
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
from typing import Any

import numpy as np
import torch

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.scoring.tifu import (
    NeighbourIndex,
    SparseRows,
    customer_vectors,
    query_chunks,
)
from basketgnn.scoring.tifu import SparseScores as NeighbourScores


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
        own = customer_vectors(
            data.histories(instances.users, instances.n_history), data.n_items, self.m, self.r_b, self.r_g
        )
        codes = self.query_codes(data.user_ids[instances.users])
        top = min(self.top, data.n_items)
        parts: dict[int, list[NeighbourScores]] = {k: [] for k in ks}
        for _, _, nbrs in query_chunks(self._index, own, codes, max(ks)):
            for k in ks:
                mean = self._index.mean(nbrs[:, :k])  # [c, I] float32
                parts[k].append(NeighbourScores.top_scaled(mean, top, np.float32))
        return {k: NeighbourScores.concat(parts[k]) for k in ks}

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
