"""Which items the neighbour pool buys together: the re-ranking stage's item-pair columns.

For items i and j, C_ij counts the pool customers (TIFU-KNN's pool: training customers, each
over its history and target basket) who bought both, d_i = C_ii the pool customers who bought
i, and

    cos(i, j) = C_ij / sqrt(max(d_i, 1) · max(d_j, 1))      (0 for i = j).

The table keeps each item's ``top`` largest C_ij (ties to the lower j), so row i lists the
items most often bought by i's buyers. For an instance whose history holds the distinct items
H, candidate j has

    item_pairs_sum = log(1 + Σ_{i ∈ H} cos(i, j)),   item_pairs_max = max_{i ∈ H} cos(i, j),

C_ij read from row i (0 when j is not among i's kept pairs).

A customer of the pool has its own items O left out: C_ij − [i ∈ O][j ∈ O] for a kept pair,
d_i − [i ∈ O]. Without it, a training instance's target basket is inside C, and the stage
learns to trust the pairs its own target made, which no new basket has.

TIFU-KNN's neighbours hold what customers like this one buy; the pairs hold what is bought with
this customer's own items by everyone, which reaches items that no neighbour bought.

Shapes: I items, P kept pairs, D pool customers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from basketgnn.data.dataset import BasketData, Histories, ranges
from basketgnn.data.split import Instances
from basketgnn.scoring.item_pairs_kernel import pair_columns, top_pairs
from basketgnn.scoring.tifu import pool_codes, query_codes

#: The columns the pairs add to the stage's features, in this order.
PAIR_FEATURES = ("item_pairs_sum", "item_pairs_max")
#: Pairs kept per item by default.
TOP = 150


@dataclass(frozen=True)
class ItemPairs:
    """Each item's kept pair counts and the pool customers' own items (module docstring).

    Shapes: offsets [I + 1] int64; partners [P] int32 (each row by count, largest first, ties
    to the lower item); counts [P] int32; degree [I] int32; ids [D] str (sorted);
    own_offsets [D + 1] int64; own_items [entries] int32 (ascending within a customer).
    """

    offsets: np.ndarray
    partners: np.ndarray
    counts: np.ndarray
    degree: np.ndarray
    ids: np.ndarray
    own_offsets: np.ndarray
    own_items: np.ndarray

    @classmethod
    def of(cls, data: BasketData, pool: Instances, top: int = TOP) -> ItemPairs:
        """The table over ``pool``'s customers, each over its first n_history + 1 baskets."""
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        n_items = data.n_items
        ids, codes = pool_codes(data.user_ids[pool.users])
        visible = data.histories(pool.users, np.asarray(pool.n_history) + 1).items_per_instance()
        owner = np.repeat(codes, np.diff(visible.offsets))
        keys = np.unique(owner * n_items + visible.values.astype(np.int64))  # (customer, item), distinct
        customer, item = keys // n_items, keys % n_items
        own_offsets = np.concatenate([[0], np.cumsum(np.bincount(customer, minlength=len(ids)))]).astype(np.int64)
        bought = sp.csr_matrix((np.ones(len(keys), np.int32), item, own_offsets), shape=(len(ids), n_items))
        offsets, partners, counts, degree = _top_pairs(bought, top)
        return cls(offsets, partners, counts, degree, ids, own_offsets, item.astype(np.int32))

    def columns(
        self, data: BasketData, instances: Instances, hist: Histories, items: np.ndarray, out: np.ndarray, column: int
    ) -> None:
        """Write :data:`PAIR_FEATURES` of each instance's candidates into out[..., column] and
        out[..., column + 1]. ``hist``: the instances' histories.

        Shapes: items [n, C]; out [n, C, F] float32.
        """
        if self.degree.shape[0] != data.n_items:
            raise ValueError(f"the item pairs cover {self.degree.shape[0]} items but the data {data.n_items}")
        partners = np.ascontiguousarray(self.partners, np.int32).view(np.uint32)
        pair_columns(
            self.offsets, partners, self.counts, self.degree, self.own_offsets, self.own_items,
            query_codes(self.ids, data.user_ids[instances.users]), hist.basket_offsets.astype(np.int64, copy=False),
            hist.baskets.offsets.astype(np.int64, copy=False), hist.baskets.values, np.ascontiguousarray(items, dtype=np.int64),
            column, out,
        )  # fmt: skip

    def strongest(
        self, data: BasketData, instances: Instances, hist: Histories, items: np.ndarray, top: int
    ) -> list[list[list[tuple[int, float, float]]]]:
        """For each instance's items j, the ``top`` history items i with the largest
        cos(i, j) > 0 (ties to the lower i), as (i, cos(i, j), the share C_ij / d_i of i's
        buyers who bought j), with the customer's own items left out as in the columns. What
        a recommendation's reason names; not a hot path (a loop over instances).

        Shapes: items [n, k] -> n lists of k lists."""
        codes = query_codes(self.ids, data.user_ids[instances.users])
        per = hist.items_per_instance()
        n, k = items.shape
        where = np.full(data.n_items, -1, np.int64)  # an item's column among the row's items
        lengths = np.diff(self.offsets)
        out = []
        for r in range(n):
            mine = [[] for _ in range(k)]
            out.append(mine)
            h = np.unique(per.values[per.offsets[r] : per.offsets[r + 1]]).astype(np.int64)
            valid = np.flatnonzero(items[r] >= 0)
            where[items[r, valid]] = valid
            entry = ranges(self.offsets[h], lengths[h])
            source = np.repeat(h, lengths[h])
            column = where[self.partners[entry]]
            where[items[r, valid]] = -1
            keep = column >= 0
            source, target, column = source[keep], self.partners[entry][keep].astype(np.int64), column[keep]
            own = self.own_items[self.own_offsets[codes[r]] : self.own_offsets[codes[r] + 1]] if codes[r] >= 0 else []
            own_i, own_j = np.isin(source, own), np.isin(target, own)
            count = self.counts[entry][keep] - (own_i & own_j)
            d_i = np.maximum(self.degree[source] - own_i, 1).astype(np.float64)
            cos = count / np.sqrt(d_i) / np.sqrt(np.maximum(self.degree[target] - own_j, 1))
            order = np.lexsort((source, -cos, column))
            for c, i, value, share in zip(column[order].tolist(), source[order].tolist(), cos[order].tolist(), (count / d_i)[order].tolist()):
                if value > 0 and len(mine[c]) < top:
                    mine[c].append((i, value, share))
        return out

    def state(self) -> dict[str, Any]:
        return {**asdict(self), "ids": self.ids.tolist()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ItemPairs:
        return cls(**{k: np.asarray(v) for k, v in state.items()})


def _top_pairs(bought: sp.csr_matrix, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each item's ``top`` largest off-diagonal counts of C = boughtᵀ · bought, larger count
    first, then the lower item (:func:`~basketgnn.scoring.item_pairs_kernel.top_pairs`), as CSR,
    and the diagonal.

    Shapes: bought [D, I] 0/1 -> (offsets [I + 1] int64, partners [P] int32, counts [P] int32,
    degree [I] int32).
    """
    n_items = bought.shape[1]
    by_item = bought.T.tocsr()  # [I, D]: each item's buyers
    keep = max(min(top, n_items - 1), 0)
    partners, counts = np.empty((n_items, keep), np.int32), np.empty((n_items, keep), np.int32)
    kept = np.zeros(n_items, np.int64)
    top_pairs(
        by_item.indptr.astype(np.int64), by_item.indices.astype(np.int64),
        bought.indptr.astype(np.int64), bought.indices.astype(np.int64), partners, counts, kept,
    )  # fmt: skip
    held = np.arange(keep)[None, :] < kept[:, None]  # each row's first kept[i] places
    offsets = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
    return offsets, partners[held], counts[held], np.diff(by_item.indptr).astype(np.int32)
