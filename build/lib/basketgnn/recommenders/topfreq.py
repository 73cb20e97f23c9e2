"""Popularity baselines: global and personal top-frequency.

**G-TopFreq** ranks items by how many training baskets contain them, the same list for everyone:

    score(u, i) = c_i,    c_i = |{training baskets b : i ∈ b}|

The training baskets are, for every training instance (u, h), baskets 0..h of u (history and
target): with the predefined DNNTSP split, every basket of every training user. Validation and
test users' baskets are not counted. This plain definition reproduces the published "Top" row
of the DNNTSP paper on TaFeng exactly (recall/NDCG/PHR @10 .1025/.0974/.3047, @20
.1227/.1033/.3682); counting only the training users' histories (without their last basket)
gives a much lower .0818/.0885/.2641 @10, and adding the validation and test users' histories
changes nothing at 4 decimals. Baskets are sets, so "baskets containing i" equals the number of
rows of i. Ties keep the lower item index first (:func:`basketgnn.metrics.top_k`).

**P-TopFreq** ranks a customer's own items by how many of their history baskets contain them,
then fills ties and the remaining slots by global popularity:

    score(u, i) = n_{u,i} + ρ_i,    n_{u,i} = |{b ∈ history(u) : i ∈ b}|,
    ρ_i = dense_rank(c_i) / n_levels ∈ [0, 1)

where ``dense_rank`` numbers the distinct values of ``c`` from 0 (least popular) upwards and
``n_levels`` is how many distinct values there are. Since ρ < 1 it can only reorder items with
equal own counts: own items come first by own count, then every other item by popularity.
Ranks rather than raw counts keep the steps between popularity levels as wide as possible,
so float32 scores still separate them at large own counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances


def training_item_counts(data: BasketData, train: Instances) -> np.ndarray:
    """Number of training baskets (baskets 0..h of every training instance) containing each item.

    Shapes: -> [data.n_items] int64.
    """
    visible = data.histories(train.users, np.asarray(train.n_history) + 1)
    return np.bincount(visible.baskets.values, minlength=data.n_items).astype(np.int64)


def history_item_counts(data: BasketData, instances: Instances) -> np.ndarray:
    """Number of history baskets of each instance that contain each item (dense).

    Shapes: -> [len(instances), data.n_items] float32.
    """
    n, n_items = len(instances), data.n_items
    per_instance = data.histories(instances.users, instances.n_history).items_per_instance()
    out = np.zeros((n, n_items), dtype=np.float32)
    # Baskets are sets, so counting (instance, item) pairs counts the baskets holding the item.
    keys = per_instance.row_ids() * n_items + per_instance.values  # [nnz]
    np.add.at(out.reshape(-1), keys, np.float32(1.0))
    return out


class GTopFreq:
    """Global top-frequency: every instance gets the training basket counts as scores."""

    name = "g-topfreq"

    def __init__(self) -> None:
        self._counts: np.ndarray | None = None

    def fit(
        self, data: BasketData, train: Instances, validate: Instances | None = None
    ) -> GTopFreq:
        self._counts = training_item_counts(data, train)
        return self

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Shapes: -> [len(instances), data.n_items] float32 (identical rows)."""
        counts = _fitted(self._counts, self.name, data)
        return np.tile(counts.astype(np.float32), (len(instances), 1))

    def params(self) -> dict[str, Any]:
        return {"counted": "training baskets 0..h of every training instance"}


class PTopFreq:
    """Personal top-frequency: own history basket counts, ties and gaps filled by popularity."""

    name = "p-topfreq"

    def __init__(self) -> None:
        self._tie_break: np.ndarray | None = None

    def fit(
        self, data: BasketData, train: Instances, validate: Instances | None = None
    ) -> PTopFreq:
        counts = training_item_counts(data, train)
        levels, level = np.unique(counts, return_inverse=True)
        self._tie_break = (level / len(levels)).astype(np.float32)  # [n_items] in [0, 1)
        return self

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Shapes: -> [len(instances), data.n_items] float32."""
        tie_break = _fitted(self._tie_break, self.name, data)
        out = history_item_counts(data, instances)
        out += tie_break[None, :]
        return out

    def params(self) -> dict[str, Any]:
        return {"own": "history basket counts", "fill": "training basket counts (G-TopFreq)"}


def _fitted(array: np.ndarray | None, name: str, data: BasketData) -> np.ndarray:
    if array is None:
        raise RuntimeError(f"{name}: call fit() before score()")
    if len(array) != data.n_items:
        raise ValueError(
            f"{name}: fitted on {len(array)} items but the data has {data.n_items}; "
            "score the same dataset the model was fitted on"
        )
    return array
