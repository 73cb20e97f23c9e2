"""TIFU machinery shared by TIFU-KNN and score fusion: decayed customer vectors, the neighbour
search and the neighbour mean (Hu et al., SIGIR 2020).

This module sits below its users (``recommenders.tifu_knn``, ``scoring.fusion``) and imports
nothing from recommenders/, models/ or engine/.

**Customer vector.** A sequence of T baskets with multi-hot vectors x_1 … x_T (time order) is cut
into groups of m baskets counted back from the most recent one, so the oldest group may be
short. With ``back(t) = T - t`` (0 for the most recent basket), basket t lies in group
``g(t) = back(t) // m`` (0 = most recent group) at position ``p(t) = back(t) % m`` inside it:

    group vector  y_g = (1 / |g|) · Σ_{t ∈ g} r_b^{p(t)} · x_t
    customer      v   = (1 / G)   · Σ_{g=0..G-1} r_g^g · y_g,       G = ceil(T / m)

Worked example, T = 3 baskets, m = 2: groups {x_3, x_2} and {x_1}, so
``v = ((x_3 + r_b·x_2) / 2 + r_g · x_1 / 1) / 2``.

**Score.** Let N_k(u) be the k pool customers (training customers over their whole visible
sequence) nearest to v_u in Euclidean distance, never u itself. Then

    score(u) = α · v_u + (1 − α) · (1 / k) · Σ_{n ∈ N_k(u)} v_n

**Computation.** Vectors are sparse rows (CSR, numpy) built for all instances at once. Query
instances are processed in chunks: distances come from ``||q||² + ||t||² − 2 q·t`` with one
sparse(query) × sparse(pool) product (an inverted index: each query touches only the pool
entries of its own items), neighbours from an exact top-k (ties at equal distance go to the
lower pool row), and the neighbour mean from the neighbours' own entries (W · V with W the
chunk's [c, P] averaging weights, k entries a row, a scipy CSR product). Both sums are taken in a fixed order (ascending
item, resp. pool row), whatever the chunk. Chunks are sized so that no dense block exceeds 256K
elements (it stays in cache); nothing of size [P, I] is ever dense. TIFU-KNN's dense scores use this
batch code; tuning (:meth:`NeighbourIndex.ranked`) and the fusion's
scores (:meth:`NeighbourIndex.kept_scores`) get the same bits customer by customer from compiled
kernels (:mod:`basketgnn.scoring.tifu_kernel`). Scoring may instead start each neighbour mean
from the sum of the pool rows most queries share (:meth:`NeighbourIndex.common_rows`): the same
neighbours and kept items, the means equal up to float64 rounding, a fraction of the entries
read when the neighbour sets overlap.

**Tuning** (:func:`tune_tifu`): a two-stage grid search maximising the mean of NDCG@10 and
NDCG@20 on validation targets: first (m, r_b, r_g) with the starting k and α, then (k, α) with
the best (m, r_b, r_g). Neighbours are found once per vector setting for the largest k; smaller
k reuse the nearest prefix. Validation sets larger than ``sample`` instances are subsampled
with a fixed seed.

Shapes in this module: n query instances, P pool customers, I items.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import product

import numpy as np
import scipy.sparse as sp
import torch

from basketgnn.data.dataset import BasketData, Histories, _offsets, ranges
from basketgnn.data.split import Instances
from basketgnn.metrics import ranking_metrics
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu_kernel import (
    decayed_rows,
    tifu_kept_scores,
    tifu_neighbours,
    tifu_ranked,
)

#: Default tuning grid; any key may be overridden.
DEFAULT_GRID: dict[str, tuple[float, ...]] = {
    "m": (2, 3, 5, 7),
    "r_b": (0.9, 1.0),
    "r_g": (0.6, 0.7, 0.9),
    "k": (50, 100, 300),
    "alpha": (0.2, 0.5, 0.8),
}
#: Validation objective: mean NDCG at these cut-offs.
TUNE_KS: tuple[int, ...] = (10, 20)
# Elements of one dense [chunk, n_items] or [chunk, n_train] block (float64: 2 MiB): the
# dozen passes over each block stay in the core's cache.
_CHUNK_ELEMENTS = 1 << 18


#: Pool rows searched to find the rows most queries share (:meth:`NeighbourIndex.common_rows`).
COMMON_QUERIES = 2048

#: An item held by more than this share of the pool rows gets a dense column for the compiled
#: distances (``tifu_kernel._distances``): a contiguous pass over every row is then cheaper than
#: scattering over its rows. Memory: at most nnz / (share · P) columns of P entries, 4 nnz floats.
DENSE_ITEM_SHARE = 0.25

#: Default size of the neighbour pool (:func:`capped_pool`): searches are exact up to 20,000
#: training customers (as on DC, TaFeng and the realistic export, whose published numbers they
#: reproduce) and cost O(n · 20,000) beyond, not O(n · N). None = every training customer.
DEFAULT_POOL_CAP: int | None = 20_000


@dataclass(frozen=True)
class TifuParams:
    """TIFU-KNN's hyperparameters: k neighbours, group size m, decays r_b (inside a group) and
    r_g (between groups), and α, the weight of the customer's own vector. ``pool_cap``: search
    neighbours among at most this many training customers, a sample seeded by ``pool_seed``
    (:func:`capped_pool`; None: all of them)."""

    k: int = 300
    m: int = 3
    r_b: float = 1.0
    r_g: float = 0.7
    alpha: float = 0.2
    pool_cap: int | None = DEFAULT_POOL_CAP
    pool_seed: int = 0

    def __post_init__(self) -> None:
        if self.pool_cap is not None and self.pool_cap < 1:
            raise ValueError(f"pool_cap must be >= 1 or None (every customer), got {self.pool_cap}")


def capped_pool(train: Instances, cap: int | None, seed: int = 0) -> Instances:
    """The neighbour pool: ``train`` itself when it has at most ``cap`` instances (or cap is
    None), else ``cap`` of them drawn uniformly without replacement with ``seed``, in their
    original order. The search then costs O(n · cap) instead of O(n · len(train)).

    Shapes: train of n -> Instances of min(n, cap).
    """
    if cap is None or len(train) <= cap:
        return train
    keep = np.sort(np.random.default_rng(seed).choice(len(train), size=cap, replace=False))
    return Instances(np.asarray(train.users)[keep], np.asarray(train.n_history)[keep])


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

    def csr(self, rows: slice) -> sp.csr_matrix:
        """A contiguous run of rows as a scipy CSR matrix. Shapes: -> [len(rows), n_cols]."""
        start, stop, _ = rows.indices(self.n_rows)
        lo, hi = self.indptr[start], self.indptr[stop]
        return sp.csr_matrix(
            (self.values[lo:hi], self.indices[lo:hi], self.indptr[start : stop + 1] - lo),
            shape=(stop - start, self.n_cols),
        )

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

    # Per instance and item, the weights of its entries summed in entry order (compiled; the
    # same bits as np.bincount over np.unique's (instance, item) keys).
    indptr, items, values = decayed_rows(
        np.asarray(histories.basket_offsets, np.int64), np.asarray(histories.baskets.offsets, np.int64),
        np.asarray(histories.baskets.values, np.int64), weight.astype(np.float64), int(n_items),
    )  # fmt: skip
    nnz = int(indptr[-1])
    return SparseRows(indptr, items[:nnz].copy(), values[:nnz].copy(), n_items)


class NeighbourIndex:
    """Training customers' vectors, searchable by Euclidean distance.

    ``dtype`` is the precision of the search: float64 (TIFU-KNN, which reproduces published
    numbers tie for tie) or float32 (neighbour scores for DNNTSP: half the memory traffic).

    Both products are sparse × sparse: a query's dot products with the pool cost the pool
    entries of the query's own items, and a neighbour mean the entries of its k neighbours,
    instead of every pool entry once per query. Each dot product and each mean sums its terms
    in ascending item (resp. pool row) order, whatever the chunk of queries.
    """

    def __init__(self, vectors: SparseRows, users: np.ndarray, dtype: type = np.float64) -> None:
        self.vectors = vectors
        self.dtype = dtype
        self.users = np.asarray(users, dtype=np.int64)  # [n_train]
        self.sq_norms = vectors.squared_norms().astype(dtype)  # [n_train]
        shape = (vectors.n_rows, vectors.n_cols)
        self._rows = sp.csr_matrix((vectors.values.astype(dtype), vectors.indices, vectors.indptr), shape=shape)
        self._rows_t = self._rows.T.tocsr()  # [n_items, n_train]: each item's pool rows, ascending
        self._rows_t.sort_indices()
        order = np.argsort(self.users, kind="stable")
        self._by_user, self._sorted_users = order, self.users[order]
        self._common: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._dense: tuple[np.ndarray, np.ndarray] | None = None

    def nearest(self, query: np.ndarray, query_users: np.ndarray, k: int) -> np.ndarray:
        """The k nearest training rows of each query, nearest first, ties at equal distance to
        the lower training row; -1 pads when fewer exist.

        Shapes: query [c, n_items] (the index's dtype), query_users [c] -> [c, k] int64.
        """
        return self.nearest_sparse(sp.csr_matrix(np.asarray(query, dtype=self.dtype)), query_users, k)

    def nearest_sparse(self, query: sp.csr_matrix, query_users: np.ndarray, k: int) -> np.ndarray:
        """:meth:`nearest` of queries given as CSR rows. Shapes: query [c, n_items] -> [c, k]."""
        query = sp.csr_matrix(query, dtype=self.dtype)
        query.sort_indices()
        dist = self.sq_norms[None, :] - 2.0 * self._dots(query)  # [c, n_train]; ||q||² is the same per row
        # A customer is not its own neighbour: mask the training rows of the same user.
        lo = np.searchsorted(self._sorted_users, query_users, side="left")
        hi = np.searchsorted(self._sorted_users, query_users, side="right")
        same = ranges(lo, hi - lo)
        dist[np.repeat(np.arange(dist.shape[0]), hi - lo), self._by_user[same]] = np.inf

        c, n_train = dist.shape
        k_eff = min(k, n_train)
        out = np.full((c, k), -1, dtype=np.int64)
        if k_eff == 0 or c == 0:
            return out
        nbrs = _smallest(dist, k_eff)  # [c, k_eff] nearest first, ties to the lower row
        found = np.isfinite(np.take_along_axis(dist, nbrs, axis=1))
        out[:, :k_eff] = np.where(found, nbrs, -1)
        return out

    def kept_scores(
        self, own: SparseRows, query_users: np.ndarray, k: int, alphas: Sequence[float], top: int,
        exact_sums: bool = True,
    ) -> dict[float, SparseScores]:
        """Each query's TIFU score for each α, its ``top`` largest positive entries divided by
        its largest one: ``SparseScores.top_scaled(combine(own, mean(nearest(own)), α))``
        computed customer by customer (``scoring.tifu_kernel``; float64 index only). With
        ``exact_sums`` the same bits; else each neighbour mean starts from the sum of
        :meth:`common_rows` (the same neighbours, the mean equal up to float64 rounding, far
        fewer pool entries read when most queries share most neighbours).

        Shapes: own SparseRows [n, I], query_users [n] -> {α: SparseScores of n rows}.
        """
        base = self._no_base if exact_sums else self.common_rows(int(k))
        offsets, items, values = tifu_kept_scores(
            *self._kernel_inputs(own, query_users), int(k), np.asarray(alphas, dtype=np.float64), int(top),
            own.n_cols, base,
        )  # fmt: skip
        return {alpha: SparseScores.from_buffers(offsets[a], items[a], values[a]) for a, alpha in enumerate(alphas)}

    @property
    def _no_base(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int32)

    def common_rows(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The k pool rows found most often among the pool's own customers' k nearest (at
        most :data:`COMMON_QUERIES` of them, evenly spaced; ties to the lower row), ascending,
        with their sum and how many of them hold each item: a base most queries' neighbour sets
        differ from in few rows. Computed once per k.

        Shapes: -> (rows [min(k, P)] int64, sum [I] float64, count [I] int32)."""
        if k not in self._common:
            rows = self.vectors
            ask = np.arange(0, rows.n_rows, max(1, -(-rows.n_rows // COMMON_QUERIES)))
            sub = self._rows[ask]
            queries = SparseRows(sub.indptr.astype(np.int64), sub.indices.astype(np.int64), sub.data, rows.n_cols)
            nearest = self.kernel_neighbours(queries, self.users[ask], k)
            often = np.bincount(nearest[nearest >= 0], minlength=rows.n_rows)
            base = np.sort(np.argsort(-often, kind="stable")[: min(k, rows.n_rows)])
            sub = self._rows[base]
            total = np.zeros(rows.n_cols)
            for p in range(len(base)):  # in ascending row order
                lo, hi = sub.indptr[p], sub.indptr[p + 1]
                total[sub.indices[lo:hi]] += sub.data[lo:hi]
            # At most k: int32 halves what each query copies and updates (the kernel's count).
            count = np.bincount(sub.indices, minlength=rows.n_cols).astype(np.int32)
            self._common[k] = (base.astype(np.int64), total, count)
        return self._common[k]

    def kernel_neighbours(self, own: SparseRows, query_users: np.ndarray, k: int) -> np.ndarray:
        """The neighbours :meth:`kept_scores` averages for each query, ascending pool rows, -1
        after (``scoring.tifu_kernel``; float64 index only). Shapes: own [n, I] -> [n, k]."""
        return tifu_neighbours(*self._kernel_inputs(own, query_users), int(k))

    def ranked(
        self, own: SparseRows, query_users: np.ndarray, ks: Sequence[int], alphas: Sequence[float], cut: int
    ) -> np.ndarray:
        """Each query's first ``cut`` items by TIFU score for every (k, α):
        ``metrics.top_k(combine(own, mean(nearest(own)[:, :k]), α), cut)`` with the same items,
        customer by customer (``scoring.tifu_kernel``; float64 index only).

        Shapes: own SparseRows [n, I], query_users [n], ks ascending -> [K, A, n, cut] int64.
        """
        if (own.values < 0).any() or (self._rows.data < 0).any():
            raise ValueError("TIFU vectors have negative entries (decays r_b, r_g must be >= 0)")
        return tifu_ranked(
            *self._kernel_inputs(own, query_users), np.asarray(ks, np.int64),
            np.asarray(alphas, dtype=np.float64), int(cut), own.n_cols,
        )  # fmt: skip

    def _kernel_inputs(self, own: SparseRows, query_users: np.ndarray) -> tuple[np.ndarray, ...]:
        """The queries, the pool rows each may not use (its own customer's), the pool and its
        transpose, as the kernels take them."""
        if self.dtype != np.float64:
            raise ValueError("the compiled search needs the float64 index")
        query_users = np.asarray(query_users, dtype=np.int64)
        lo = np.searchsorted(self._sorted_users, query_users, side="left")
        same = np.searchsorted(self._sorted_users, query_users, side="right") - lo
        rows, inv = self._rows, self._rows_t
        return (  # fixed dtypes: one compiled version of each kernel
            np.asarray(own.indptr, np.int64), np.asarray(own.indices, np.int64), np.asarray(own.values, np.float64),
            _offsets(same), self._by_user[ranges(lo, same)],
            np.asarray(rows.indptr, np.int64), np.asarray(rows.indices, np.int32), rows.data,
            np.asarray(inv.indptr, np.int64), np.asarray(inv.indices, np.int32), inv.data, self.sq_norms,
            *self.dense_columns(),
        )  # fmt: skip

    def dense_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """The pool's columns of the items more than :data:`DENSE_ITEM_SHARE` of its rows hold,
        as dense rows, and each item's place among them (-1: none), for the compiled distances.
        Computed once.

        Shapes: -> (slot [I] int64, dense [n_dense, P] float64)."""
        if self._dense is None:
            inv = self._rows_t
            held = np.diff(inv.indptr)  # [I] pool rows holding each item
            items = np.flatnonzero(held > DENSE_ITEM_SHARE * inv.shape[1])
            slot = np.full(inv.shape[0], -1, np.int64)
            slot[items] = np.arange(len(items))
            self._dense = slot, np.ascontiguousarray(inv[items].toarray(), dtype=np.float64)
        return self._dense

    def _dots(self, query: sp.csr_matrix) -> np.ndarray:
        """q · v for every query and pool row: a CSR product with the pool's item → rows index,
        each sum taken in ascending item order. Shapes: query [c, n_items] CSR with sorted
        indices -> [c, n_train]."""
        return (query @ self._rows_t).toarray()

    def mean(self, neighbours: np.ndarray) -> np.ndarray:
        """Mean vector of each row's neighbours (-1 entries ignored).

        Shapes: neighbours [c, k] int64 -> [c, n_items] (the index's dtype).
        """
        c = len(neighbours)
        valid = neighbours >= 0
        count = np.maximum(valid.sum(axis=1), 1)  # [c]
        # Averaging weights W [c, n_train] in CSR, each row's neighbours ascending, so that
        # W · V sums each mean over the neighbours in ascending pool row order.
        missing = np.iinfo(np.int64).max
        nbrs = np.sort(np.where(valid, neighbours, missing), axis=1)
        query_row, slot = np.nonzero(nbrs != missing)
        weights = sp.csr_matrix(
            ((1.0 / count[query_row]).astype(self.dtype), nbrs[query_row, slot], _offsets(np.bincount(query_row, minlength=c))),
            shape=(c, self.vectors.n_rows),
        )
        return (weights @ self._rows).toarray()


def pool_vectors(data: BasketData, train: Instances, m: int, r_b: float, r_g: float) -> SparseRows:
    """The pool: each training instance's customer over its history *and* target basket.

    Shapes: -> SparseRows [len(train), I].
    """
    visible = data.histories(train.users, np.asarray(train.n_history) + 1)
    return customer_vectors(visible, data.n_items, m, r_b, r_g)


def combine(own: np.ndarray, neighbour_mean: np.ndarray, alpha: float) -> np.ndarray:
    """alpha * own + (1 - alpha) * neighbour mean, rounded to the float32 that TIFU-KNN's
    ``score`` returns (tuning ranks exactly what scoring will). Shapes: [c, I] x 2 -> [c, I]
    float32.
    """
    return (alpha * own + (1.0 - alpha) * neighbour_mean).astype(np.float32)


def query_chunks(
    index: NeighbourIndex, vectors: SparseRows, users: np.ndarray, k: int
) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """Query rows in blocks: (rows, dense own vectors [c, I], neighbours [c, k]).

    ``users`` are the queries' keys in the index's ``users`` (pool rows with the same key are
    never neighbours)."""
    size = max(1, _CHUNK_ELEMENTS // max(vectors.n_cols, index.vectors.n_rows, 1))
    users = np.asarray(users, dtype=np.int64)
    for start in range(0, vectors.n_rows, size):
        rows = slice(start, min(start + size, vectors.n_rows))
        own = vectors.dense(rows, dtype=index.dtype)
        yield rows, own, index.nearest_sparse(vectors.csr(rows), users[rows], k)


def customer_codes(pool_ids: np.ndarray, query_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys for an index keyed by customer id (strings): pool rows get the code of
    their id, queries the same code when their id is in the pool and -1 otherwise.

    Shapes: pool_ids [P], query_ids [n] -> ([P] int64, [n] int64).
    """
    ids, pool = pool_codes(pool_ids)
    return pool, query_codes(ids, query_ids)


def pool_codes(pool_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`customer_codes`' pool half: the pool's distinct ids (sorted, str; what
    :func:`query_codes` reads) and each pool row's code. Shapes: pool_ids [P] -> ([D], [P] int64)."""
    ids, codes = np.unique(np.asarray(pool_ids).astype(str), return_inverse=True)
    return ids, codes.astype(np.int64)


def query_codes(ids: np.ndarray, query_ids: np.ndarray) -> np.ndarray:
    """:func:`customer_codes`' query half, from the pool's distinct ids (sorted, str): the
    position of each query's id among them, -1 when absent. Shapes: ids [D], query_ids [n]
    -> [n] int64."""
    query = np.asarray(query_ids).astype(str)
    if len(ids) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    pos = np.clip(np.searchsorted(ids, query), 0, len(ids) - 1)
    return np.where(ids[pos] == query, pos, -1).astype(np.int64)


def tune_tifu(
    data: BasketData,
    train: Instances,
    validate: Instances,
    start: TifuParams,
    grid: dict[str, Sequence[float]] | None = None,
    sample: int | None = 2000,
    seed: int = 0,
) -> tuple[TifuParams, float]:
    """TIFU-KNN's two-stage validation grid search (module docstring); returns the best
    parameters and their validation mean NDCG@10,20. Pool rows are keyed by user index, so a
    validation customer is never its own neighbour; the pool is ``start``'s capped pool."""
    train = capped_pool(train, start.pool_cap, start.pool_seed)
    grid = {key: tuple(grid[key]) if grid and key in grid else v for key, v in DEFAULT_GRID.items()}
    if sample is not None and len(validate) > sample:
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(validate), size=sample, replace=False))
        validate = Instances(validate.users[keep], validate.n_history[keep])
    targets = data.targets(validate.users, validate.n_history)
    ks = tuple(sorted({min(k, data.n_items) for k in TUNE_KS}))
    histories = data.histories(validate.users, validate.n_history)

    def evaluate(
        m: int, r_b: float, r_g: float, ks_nbr: Sequence[int], alphas: Sequence[float]
    ) -> dict[tuple[int, float], float]:
        index = NeighbourIndex(pool_vectors(data, train, m, r_b, r_g), train.users)
        own = customer_vectors(histories, data.n_items, m, r_b, r_g)
        ks_sorted = sorted(ks_nbr)
        ranked_all = index.ranked(own, validate.users, ks_sorted, alphas, ks[-1])  # [K, A, n, cut]
        ranked = {(k, a): ranked_all[i, j] for i, k in enumerate(ks_sorted) for j, a in enumerate(alphas)}
        out = {}
        for key, topk in ranked.items():
            metrics = ranking_metrics(topk, targets.values, targets.offsets, data.n_items, ks=ks)
            out[key] = float(np.mean([metrics[f"ndcg@{k}"] for k in ks]))
        return out

    best, best_vec = -np.inf, (start.m, start.r_b, start.r_g)
    for m, r_b, r_g in product(grid["m"], grid["r_b"], grid["r_g"]):
        value = evaluate(int(m), r_b, r_g, [start.k], [start.alpha])[start.k, start.alpha]
        if value > best:
            best, best_vec = value, (int(m), r_b, r_g)
    m, r_b, r_g = best_vec
    results = evaluate(m, r_b, r_g, sorted({int(k) for k in grid["k"]}), grid["alpha"])
    (k, alpha), value = max(results.items(), key=lambda kv: kv[1])
    return replace(start, k=int(k), m=m, r_b=r_b, r_g=r_g, alpha=alpha), value


def keep_top(x: np.ndarray, top: int) -> np.ndarray:
    """Mask of each row's ``top`` largest entries; ties at the cut go to the lower column
    (the same items ``metrics.top_k`` ranks first).

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


def _smallest(x: np.ndarray, k: int) -> np.ndarray:
    """Columns of each row's k smallest entries, smallest first, ties to the lower column
    (= ``np.argsort(x, axis=1, kind="stable")[:, :k]``, without a full sort).

    Shapes: x [c, n] (no NaN) -> [c, k] int64.
    """
    values, cols = torch.topk(torch.from_numpy(x), k, dim=1, largest=False, sorted=False)
    kth = values.max(dim=1, keepdim=True).values.numpy()  # [c, 1] the k-th smallest
    cols = cols.numpy()
    # Rows where entries equal to the k-th smallest straddle the cut take the exact rule.
    tied = np.flatnonzero((x <= kth).sum(axis=1) > k)
    if len(tied):
        cols[tied] = np.argsort(x[tied], axis=1, kind="stable")[:, :k]
    picked = np.take_along_axis(x, cols, axis=1)
    return np.take_along_axis(cols, np.lexsort((cols, picked), axis=1), axis=1)
