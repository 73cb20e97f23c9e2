"""TIFU-KNN (Hu et al., SIGIR 2020): decayed repeat vectors plus a nearest-neighbour average.

**Customer vector.** A sequence of T baskets with multi-hot vectors x_1 … x_T (time order) is cut
into groups of m baskets counted back from the most recent one, so the oldest group may be
short. With ``back(t) = T - t`` (0 for the most recent basket), basket t lies in group
``g(t) = back(t) // m`` (0 = most recent group) at position ``p(t) = back(t) % m`` inside it:

    group vector  y_g = (1 / |g|) · Σ_{t ∈ g} r_b^{p(t)} · x_t
    customer      v   = (1 / G)   · Σ_{g=0..G-1} r_g^g · y_g,       G = ceil(T / m)

Worked example, T = 3 baskets, m = 2: groups {x_3, x_2} and {x_1}, so
``v = ((x_3 + r_b·x_2) / 2 + r_g · x_1 / 1) / 2``.

**Prediction.** Let N_k(u) be the k training customers whose vectors are nearest to v_u in
Euclidean distance; training customers' vectors use their whole visible sequence (baskets 0..h
of a training instance). Then

    score(u) = α · v_u + (1 − α) · (1 / k) · Σ_{n ∈ N_k(u)} v_n

A training customer is never its own neighbour (this only matters for splits where the same
customer has a training and an evaluation instance, e.g. the temporal split); it is excluded by
user index.

**Computation.** Vectors are sparse rows (CSR, numpy) built for all instances at once. Query
instances are processed in chunks: the chunk's vectors are made dense, distances come from
``||q||² + ||t||² − 2 q·t`` with one sparse(training) × dense(query) product in float64,
neighbours from ``argpartition`` (ties at equal distance go to the lower training row; DNNTSP's
neighbour scores reuse this index in float32 with ``torch.topk``, see :class:`NeighbourIndex`), and
the neighbour mean from a second sparse product, Vᵀ · W with W the chunk's [n_train, c]
averaging weights. Chunks are sized so that no dense block exceeds ~4M elements; nothing of size
[n_train, n_items] is ever dense.

**Tuning.** With ``tune=True`` and validation instances, :meth:`TifuKnn.fit` grid-searches in two
stages to maximise the mean of NDCG@10 and NDCG@20 on the validation targets: first (m, r_b, r_g)
with the constructor's k and α, then (k, α) with the best (m, r_b, r_g). Neighbours are found
once per vector setting for the largest k; smaller k reuse the nearest prefix. Validation sets
larger than ``tune_sample`` instances (e.g. the temporal split, where every customer has one)
are subsampled with a fixed seed, which keeps tuning time bounded; the predefined DNNTSP
validation parts (900 and 984 users) are used whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np
import torch

from basketgnn.data.dataset import BasketData, Histories, ranges
from basketgnn.data.split import Instances
from basketgnn.metrics import ranking_metrics, top_k

#: Default tuning grid; any key may be overridden through ``TifuKnn(grid=...)``.
DEFAULT_GRID: dict[str, tuple[float, ...]] = {
    "m": (2, 3, 5, 7),
    "r_b": (0.9, 1.0),
    "r_g": (0.6, 0.7, 0.9),
    "k": (50, 100, 300),
    "alpha": (0.2, 0.5, 0.8),
}
#: Validation objective: mean NDCG at these cut-offs.
TUNE_KS: tuple[int, ...] = (10, 20)
# Elements of one dense [chunk, n_items] or [chunk, n_train] block (float64: 32 MiB).
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class SparseRows:
    """Rows of a sparse float64 matrix in CSR form, one row per instance.

    Shapes: indptr [n_rows + 1] int64, indices [nnz] int64 (item, ascending within a row),
    values [nnz] float64.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def squared_norms(self) -> np.ndarray:
        """Shapes: -> [n_rows] float64."""
        row = np.repeat(np.arange(self.n_rows), np.diff(self.indptr))
        return np.bincount(row, weights=self.values**2, minlength=self.n_rows)

    def dense(self, rows: np.ndarray | slice, dtype: type = np.float64) -> np.ndarray:
        """Selected rows as a dense matrix. Shapes: -> [len(rows), n_cols]."""
        idx = np.arange(self.n_rows)[rows]
        starts = self.indptr[idx]
        lengths = self.indptr[idx + 1] - starts
        entries = ranges(starts, lengths)
        out = np.zeros((len(idx), self.n_cols), dtype=dtype)
        out[np.repeat(np.arange(len(idx)), lengths), self.indices[entries]] = self.values[entries]
        return out


def customer_vectors(
    histories: Histories, n_items: int, m: int, r_b: float, r_g: float
) -> SparseRows:
    """The TIFU customer vector v (module docstring) of every instance's baskets.

    An instance without baskets gets the zero vector.

    Shapes: histories of n instances -> SparseRows [n, n_items].
    """
    if m < 1:
        raise ValueError(f"group size m must be >= 1, got {m}")
    n = histories.n
    n_baskets = np.diff(histories.basket_offsets)  # [n]
    owner = np.repeat(np.arange(n), n_baskets)  # [B] instance of each basket
    back = histories.basket_offsets[owner + 1] - 1 - np.arange(len(owner))  # [B] 0 = most recent
    group, pos = back // m, back % m
    n_groups = -(-n_baskets // m)  # [n] ceil(T / m)
    # Only the oldest group can be short: it holds T - g*m baskets when that is below m.
    group_size = np.minimum(m, n_baskets[owner] - group * m)  # [B]
    weight = (
        np.power(float(r_g), group) * np.power(float(r_b), pos) / (group_size * n_groups[owner])
    )  # [B]

    basket_of_entry = histories.baskets.row_ids()  # [nnz]
    keys = owner[basket_of_entry] * n_items + histories.baskets.values.astype(np.int64)
    uniq, inverse = np.unique(keys, return_inverse=True)
    values = np.bincount(inverse, weights=weight[basket_of_entry], minlength=len(uniq))
    rows = uniq // n_items
    indptr = np.searchsorted(rows, np.arange(n + 1)).astype(np.int64)
    return SparseRows(indptr, uniq % n_items, values, n_items)


class NeighbourIndex:
    """Training customers' vectors, searchable by Euclidean distance.

    ``dtype`` is the precision of the search: float64 (TIFU-KNN, which reproduces published
    numbers tie for tie) or float32 (neighbour scores for DNNTSP: half the memory traffic).
    """

    def __init__(self, vectors: SparseRows, users: np.ndarray, dtype: type = np.float64) -> None:
        self.vectors = vectors
        self.dtype = dtype
        self.users = np.asarray(users, dtype=np.int64)  # [n_train]
        self.sq_norms = vectors.squared_norms().astype(dtype)  # [n_train]
        row = np.repeat(np.arange(vectors.n_rows), np.diff(vectors.indptr))
        col = vectors.indices
        by_col = np.argsort(col, kind="stable")  # stable: rows stay ascending within a column
        # Both index lists are sorted and duplicate-free, i.e. already coalesced.
        values = vectors.values.astype(dtype)
        self._matrix = _coo(row, col, values, (vectors.n_rows, vectors.n_cols))
        self._matrix_t = _coo(
            col[by_col], row[by_col], values[by_col], (vectors.n_cols, vectors.n_rows)
        )
        order = np.argsort(self.users, kind="stable")
        self._by_user, self._sorted_users = order, self.users[order]

    def nearest(self, query: np.ndarray, query_users: np.ndarray, k: int) -> np.ndarray:
        """The k nearest training rows of each query, nearest first; -1 pads when fewer exist.

        Shapes: query [c, n_items] (the index's dtype), query_users [c] -> [c, k] int64.
        """
        query = np.asarray(query, dtype=self.dtype)
        dot = torch.sparse.mm(self._matrix, torch.from_numpy(query).T.contiguous()).numpy().T
        dist = self.sq_norms[None, :] - 2.0 * dot  # [c, n_train]; ||q||² is the same per row
        # A customer is not its own neighbour: mask the training rows of the same user.
        lo = np.searchsorted(self._sorted_users, query_users, side="left")
        hi = np.searchsorted(self._sorted_users, query_users, side="right")
        same = ranges(lo, hi - lo)
        dist[np.repeat(np.arange(len(query)), hi - lo), self._by_user[same]] = np.inf

        n_train = dist.shape[1]
        k_eff = min(k, n_train)
        if k_eff < n_train and self.dtype == np.float32:
            # torch's top-k is ~2x faster than argpartition; which of several candidates tied
            # at the k-th distance it keeps may differ, so float64 (TIFU-KNN) keeps numpy's.
            cand = torch.topk(torch.from_numpy(dist), k_eff, dim=1, largest=False, sorted=False)
            cand = cand.indices.numpy()  # [c, k_eff]
        elif k_eff < n_train:
            cand = np.argpartition(dist, k_eff - 1, axis=1)[:, :k_eff]  # [c, k_eff]
        else:
            cand = np.broadcast_to(np.arange(n_train), dist.shape)
        cand_dist = np.take_along_axis(dist, cand, axis=1)
        order = np.lexsort((cand, cand_dist), axis=1)  # by distance, then training row
        nbrs = np.take_along_axis(cand, order, axis=1)
        nbrs = np.where(np.isfinite(np.take_along_axis(cand_dist, order, axis=1)), nbrs, -1)
        out = np.full((len(query), k), -1, dtype=np.int64)
        out[:, :k_eff] = nbrs
        return out

    def mean(self, neighbours: np.ndarray) -> np.ndarray:
        """Mean vector of each row's neighbours (-1 entries ignored).

        Shapes: neighbours [c, k] int64 -> [c, n_items] (the index's dtype).
        """
        c = len(neighbours)
        valid = neighbours >= 0
        count = np.maximum(valid.sum(axis=1), 1)  # [c]
        query_row, slot = np.nonzero(valid)
        # Averaging weights as a dense [n_train, c] block: mean = (Vᵀ W)ᵀ with V sparse.
        weights = np.zeros((self.vectors.n_rows, c), dtype=self.dtype)
        # A row's neighbours are distinct, so plain assignment (no np.add.at) is exact.
        weights[neighbours[query_row, slot], query_row] = 1.0 / count[query_row]
        return torch.sparse.mm(self._matrix_t, torch.from_numpy(weights)).numpy().T


def _coo(
    row: np.ndarray, col: np.ndarray, values: np.ndarray, size: tuple[int, int]
) -> torch.Tensor:
    """A torch sparse COO matrix from entries sorted by (row, col) without duplicates."""
    return torch.sparse_coo_tensor(
        torch.from_numpy(np.stack([row, col])),
        torch.from_numpy(values),
        size=size,
        is_coalesced=True,
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
    ) -> None:
        unknown = set(grid or {}) - set(DEFAULT_GRID)
        if unknown:
            raise ValueError(
                f"unknown grid keys {sorted(unknown)}; valid keys are {sorted(DEFAULT_GRID)}"
            )
        if k < 1 or m < 1 or not 0.0 <= alpha <= 1.0:
            raise ValueError(f"need k >= 1, m >= 1 and 0 <= alpha <= 1; got {k=}, {m=}, {alpha=}")
        self._initial = (int(k), int(m), r_b, r_g, alpha)
        self.k, self.m, self.r_b, self.r_g, self.alpha = self._initial
        self.tune, self.tune_sample, self.seed = tune, tune_sample, seed
        self.grid = {
            key: tuple(grid[key]) if grid and key in grid else values
            for key, values in DEFAULT_GRID.items()
        }
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
        self._index = self._build_index(data, train, self.m, self.r_b, self.r_g)
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
            out[rows] = _combine(own_dense, self._index.mean(nbrs), self.alpha)
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
            "validation_mean_ndcg@10,20": self.validation_score,
        }

    @staticmethod
    def _build_index(
        data: BasketData, train: Instances, m: int, r_b: float, r_g: float
    ) -> NeighbourIndex:
        visible = data.histories(train.users, np.asarray(train.n_history) + 1)
        return NeighbourIndex(customer_vectors(visible, data.n_items, m, r_b, r_g), train.users)

    def _tune(self, data: BasketData, train: Instances, validate: Instances) -> None:
        if self.tune_sample is not None and len(validate) > self.tune_sample:
            rng = np.random.default_rng(self.seed)
            keep = np.sort(rng.choice(len(validate), size=self.tune_sample, replace=False))
            validate = Instances(validate.users[keep], validate.n_history[keep])
        targets = data.targets(validate.users, validate.n_history)
        ks = tuple(sorted({min(k, data.n_items) for k in TUNE_KS}))
        histories = data.histories(validate.users, validate.n_history)

        def evaluate(
            m: int, r_b: float, r_g: float, ks_nbr: Sequence[int], alphas: Sequence[float]
        ) -> dict[tuple[int, float], float]:
            index = self._build_index(data, train, m, r_b, r_g)
            own = customer_vectors(histories, data.n_items, m, r_b, r_g)
            ranked = {
                key: np.empty((len(validate), ks[-1]), np.int64) for key in product(ks_nbr, alphas)
            }
            for rows, own_dense, nbrs in query_chunks(index, own, validate.users, max(ks_nbr)):
                for k in ks_nbr:
                    nbr_mean = index.mean(nbrs[:, :k])
                    for a in alphas:
                        ranked[k, a][rows] = top_k(_combine(own_dense, nbr_mean, a), ks[-1])
            out = {}
            for key, topk in ranked.items():
                metrics = ranking_metrics(
                    topk, targets.values, targets.offsets, data.n_items, ks=ks
                )
                out[key] = float(np.mean([metrics[f"ndcg@{k}"] for k in ks]))
            return out

        best, best_vec = -np.inf, (self.m, self.r_b, self.r_g)
        for m, r_b, r_g in product(self.grid["m"], self.grid["r_b"], self.grid["r_g"]):
            value = evaluate(int(m), r_b, r_g, [self.k], [self.alpha])[self.k, self.alpha]
            if value > best:
                best, best_vec = value, (int(m), r_b, r_g)
        self.m, self.r_b, self.r_g = best_vec
        results = evaluate(
            self.m, self.r_b, self.r_g, sorted({int(k) for k in self.grid["k"]}), self.grid["alpha"]
        )
        (self.k, self.alpha), value = max(results.items(), key=lambda kv: kv[1])
        self.tuned, self.validation_score = True, value


def _combine(own: np.ndarray, neighbour_mean: np.ndarray, alpha: float) -> np.ndarray:
    """alpha * own + (1 - alpha) * neighbour mean, rounded to the float32 that ``score`` returns
    (tuning ranks exactly what scoring will). Shapes: [c, n_items] x 2 -> [c, n_items] float32.
    """
    return (alpha * own + (1.0 - alpha) * neighbour_mean).astype(np.float32)


def query_chunks(
    index: NeighbourIndex, vectors: SparseRows, users: np.ndarray, k: int
) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """Query rows in blocks: (rows, dense own vectors [c, n_items], neighbours [c, k])."""
    size = max(1, _CHUNK_ELEMENTS // max(vectors.n_cols, index.vectors.n_rows, 1))
    users = np.asarray(users, dtype=np.int64)
    for start in range(0, vectors.n_rows, size):
        rows = slice(start, min(start + size, vectors.n_rows))
        own = vectors.dense(rows, dtype=index.dtype)
        yield rows, own, index.nearest(own, users[rows], k)
