"""TIFU-KNN (Hu et al., SIGIR 2020): decayed repeat vectors plus a nearest-neighbour average.

The formulas, the neighbour search and the validation tuning live in
:mod:`basketgnn.scoring.tifu` (shared with score fusion); this module is the recommender:

    score(u) = α · v_u + (1 − α) · (1 / k) · Σ_{n ∈ N_k(u)} v_n

with v the TIFU customer vector, N_k(u) the k training customers nearest to v_u (over their
whole visible sequence, never u itself, excluded by user index). With ``tune=True`` and
validation instances, :meth:`TifuKnn.fit` chooses (m, r_b, r_g) and then (k, α) on validation
(:func:`basketgnn.scoring.tifu.tune_tifu`, mean NDCG@10,20; validation sets larger than
``tune_sample`` are subsampled with a fixed seed, the predefined DNNTSP parts are used whole).
Search in float64, so published numbers are reproduced tie for tie.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.recommenders.base import tuning_grid
from basketgnn.scoring.tifu import (
    DEFAULT_GRID,
    DEFAULT_POOL_CAP,
    NeighbourIndex,
    TifuParams,
    capped_pool,
    combine,
    customer_vectors,
    pool_vectors,
    query_chunks,
    tune_tifu,
)


class TifuKnn:
    """TIFU-KNN next-basket recommender (see the module docstring for the formulas).

    Args:
        k: number of neighbours.
        m: group size (baskets per group).
        r_b: decay between consecutive baskets inside a group.
        r_g: decay between consecutive groups.
        alpha: weight of the customer's own vector (1 - alpha goes to the neighbours).
        tune: choose the hyperparameters on the validation instances when ``fit`` gets them.
        grid: tuning values per hyperparameter (keys of :data:`DEFAULT_GRID`), overriding the
            defaults key by key.
        tune_sample: tune on at most this many validation instances (None: all of them).
        seed: seed of the validation subsample.
        pool_cap: search neighbours among at most this many training customers, a sample
            drawn with ``pool_seed`` (default 20,000: exact below that; None: all of them; see
            ``scoring.tifu.capped_pool``).
        pool_seed: seed of that sample.
    """

    name = "tifu-knn"

    def __init__(
        self,
        *,
        k: int = 300,
        m: int = 3,
        r_b: float = 1.0,
        r_g: float = 0.7,
        alpha: float = 0.2,
        tune: bool = True,
        grid: dict[str, Sequence[float]] | None = None,
        tune_sample: int | None = 2000,
        seed: int = 0,
        pool_cap: int | None = DEFAULT_POOL_CAP,
        pool_seed: int = 0,
    ) -> None:
        self.grid = tuning_grid(grid, DEFAULT_GRID)
        if k < 1 or m < 1 or not 0.0 <= alpha <= 1.0:
            raise ValueError(f"need k >= 1, m >= 1 and 0 <= alpha <= 1; got {k=}, {m=}, {alpha=}")
        if pool_cap is not None and pool_cap < 1:
            raise ValueError(f"pool_cap must be >= 1 or null (every customer), got {pool_cap}")
        self.pool_cap, self.pool_seed = pool_cap, pool_seed
        self._initial = (int(k), int(m), r_b, r_g, alpha)
        self.k, self.m, self.r_b, self.r_g, self.alpha = self._initial
        self.tune, self.tune_sample, self.seed = tune, tune_sample, seed
        self.tuned = False
        self.validation_score: float | None = None
        self._index: NeighbourIndex | None = None
        self._n_items: int | None = None

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> TifuKnn:
        if len(train) == 0:
            raise ValueError("tifu-knn needs at least one training instance")
        self._n_items = data.n_items
        # Refitting starts again from the constructor's values, not from an earlier tuning.
        self.k, self.m, self.r_b, self.r_g, self.alpha = self._initial
        self.tuned, self.validation_score = False, None
        if self.tune and validate is not None and len(validate) > 0:
            self._tune(data, train, validate)
        pool = capped_pool(train, self.pool_cap, self.pool_seed)
        self._index = self._build_index(data, pool, self.m, self.r_b, self.r_g)
        return self

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Shapes: -> [len(instances), data.n_items] float32."""
        if self._index is None:
            raise RuntimeError("tifu-knn: call fit() before score()")
        if data.n_items != self._n_items:
            raise ValueError(
                f"tifu-knn: fitted on {self._n_items} items but the data has {data.n_items}"
            )
        own = customer_vectors(
            data.histories(instances.users, instances.n_history),
            data.n_items,
            self.m,
            self.r_b,
            self.r_g,
        )
        out = np.empty((len(instances), data.n_items), dtype=np.float32)
        for rows, own_dense, nbrs in query_chunks(self._index, own, instances.users, self.k):
            out[rows] = combine(own_dense, self._index.mean(nbrs), self.alpha)
        return out

    def params(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "m": self.m,
            "r_b": self.r_b,
            "r_g": self.r_g,
            "alpha": self.alpha,
            "tuned": self.tuned,
            "tune_sample": self.tune_sample,
            "pool_cap": self.pool_cap,
            "pool_seed": self.pool_seed,
            "validation_mean_ndcg@10,20": self.validation_score,
        }

    @staticmethod
    def _build_index(
        data: BasketData, train: Instances, m: int, r_b: float, r_g: float
    ) -> NeighbourIndex:
        return NeighbourIndex(pool_vectors(data, train, m, r_b, r_g), train.users)

    def _tune(self, data: BasketData, train: Instances, validate: Instances) -> None:
        params, value = tune_tifu(
            data, train, validate, self.tifu_params,
            self.grid, self.tune_sample, self.seed,
        )
        self.k, self.m, self.r_b, self.r_g, self.alpha = (
            params.k, params.m, params.r_b, params.r_g, params.alpha
        )
        self.tuned, self.validation_score = True, value

    @property
    def tifu_params(self) -> TifuParams:
        """The hyperparameters in use (after tuning, the chosen ones)."""
        return TifuParams(
            self.k, self.m, self.r_b, self.r_g, self.alpha, self.pool_cap, self.pool_seed
        )
