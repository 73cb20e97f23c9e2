"""UP-CF@r (Faggioli, Polato & Aiolli, "Recency Aware Collaborative Filtering for Next Basket
Recommendation", UMAP 2020): a customer's recent item popularity plus that of similar customers.

The formulas of the paper's user-based method "UP-CF@r", written here from public descriptions
of it (the authors' RACF code as documented, cornac's ``UPCF``; no code copied); where they
leave a choice, the choice made here is said:

**Recency-aware user-wise popularity.** For a sequence of T baskets and a recency window r,
with last_r the min(r, T) most recent baskets (all T when r is None):

    p_r(v, i) = |{b ∈ last_r(v) : i ∈ b}| / min(r, T_v)

**Asymmetric cosine** over the binary item sets I_u, I_v (items in *any* of the customer's
baskets, not only the last r), α ∈ [0, 1]:

    sim_α(u, v) = |I_u ∩ I_v| / (|I_u|^α · |I_v|^(1−α))

**Score**, with the locality exponent q > 0 and P the pool of training customers (their whole
visible sequence, baskets 0..h of each training instance):

    s(u, i) = p_r(u, i) + Σ_{v ∈ P, v ≠ u} sim_α(u, v)^q · p_r(v, i)

The method sums over every user, u included (cornac's ``UPCF`` puts u's own row among the
rows it sums over); sim_α(u, u) = 1 whatever α, so u's own term is its popularity over its
history (baskets 0..h-1 of the query). A pool row of the same customer
(user index) is left out: on a temporal split it would hold baskets after the query's history,
the query's target among them, and it would count u twice. Every training customer is a
neighbour (no top-k cut), as in the formula; implementations built on ``similaripy`` keep only
the k most similar customers (cornac's ``UPCF``: that library's default, k = 100).

**Tuning.** With ``tune=True`` and validation instances, :meth:`UpCf.fit` searches the whole
grid r × α × q (:data:`DEFAULT_GRID`) for the highest mean NDCG@10,20 on the validation
targets, the criterion of :func:`basketgnn.scoring.tifu.tune_tifu`; the first best point in
grid order wins ties. Validation sets larger than ``tune_sample`` are subsampled with a fixed
seed; the predefined DNNTSP parts are used whole. Windows at least as long as every history in
the pool and the validation set give the same scores as r = None and are computed once.

**Computation.** Item sets and popularities are sparse rows (scipy CSR, float64). Queries go
in chunks: the overlaps |I_u ∩ I_v| of a chunk are one sparse(pool sets) × dense(query sets)
product, the weights are taken to the power q in place, and the neighbour sum is one
sparse(popularities, item-major) × dense(weights) product; nothing of size [P, I] is dense.
Both sums run over a fixed order (ascending item, resp. pool row), so a query's scores do not
depend on its chunk. Scores are returned as float32 and tuning ranks those same float32 scores:
at large q a neighbour's share can fall below float32's resolution next to the customer's own
popularity, and the ranking then breaks ties by the lower item index, in evaluation and tuning
alike.

Shapes in this module: n query instances, c in a chunk, P pool customers, I items.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np
import scipy.sparse as sp

from basketgnn.data.dataset import BasketData, Histories, ranges
from basketgnn.data.split import Instances
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.recommenders.base import tuning_grid
from basketgnn.scoring.tifu import DEFAULT_POOL_CAP, TUNE_KS, capped_pool

#: Default tuning grid; any key may be overridden. ``r``: None = every basket. DC's and TaFeng's
#: histories hold at most 20 baskets, hence the short windows beside the paper-style 25 and 100.
DEFAULT_GRID: dict[str, tuple[Any, ...]] = {
    "r": (1, 2, 3, 5, 10, 25, 100, None),
    "alpha": (0.25, 0.5, 0.75, 1.0),
    "q": (1, 5, 10, 50),
}
# Elements of one dense [c, max(P, I)] block of a chunk (float64: 8 MiB).
_CHUNK_ELEMENTS = 1 << 20


def _window(r: float | None) -> int | None:
    """The recency window as an int (None: every basket); ``inf`` is None too."""
    if r is None or (isinstance(r, float) and math.isinf(r)):
        return None
    if isinstance(r, bool) or int(r) != r or r < 1:
        raise ValueError(f"the recency window r must be an integer >= 1 or None (all), got {r!r}")
    return int(r)


def _check(alpha: float, q: float) -> None:
    if not 0.0 <= alpha <= 1.0 or not q > 0:
        raise ValueError(f"need 0 <= alpha <= 1 and q > 0; got {alpha=}, {q=}")


def item_sets(histories: Histories, n_items: int) -> sp.csr_matrix:
    """Binary rows: 1 where the item is in any basket of the instance.

    Shapes: histories of n instances -> [n, n_items] float64 CSR (sorted indices).
    """
    per = histories.items_per_instance()
    keys = np.unique(per.row_ids() * n_items + per.values)
    rows, items = np.divmod(keys, n_items)
    counts = np.bincount(rows, minlength=histories.n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sp.csr_matrix(
        (np.ones(len(keys)), items, indptr), shape=(histories.n, n_items)
    )


def popularity(histories: Histories, n_items: int, r: int | None) -> sp.csr_matrix:
    """p_r (module docstring) of every instance: the share of its min(r, T) most recent
    baskets holding each item; an instance without baskets gets the zero row.

    Shapes: histories of n instances -> [n, n_items] float64 CSR (sorted indices).
    """
    n = histories.n
    n_baskets = np.diff(histories.basket_offsets)  # [n]
    owner = np.repeat(np.arange(n), n_baskets)  # [B] instance of each basket
    back = histories.basket_offsets[owner + 1] - 1 - np.arange(len(owner))  # [B] 0 = newest
    keep = back < (r if r is not None else np.iinfo(np.int64).max)  # [B]
    lengths = histories.baskets.lengths  # [B] items per basket
    entry_keep = np.repeat(keep, lengths)  # [E]
    entry_owner = np.repeat(owner, lengths)[entry_keep]
    keys, counts = np.unique(
        entry_owner * n_items + histories.baskets.values[entry_keep], return_counts=True
    )  # baskets are sets: entries of (instance, item) count the baskets holding it
    rows, items = np.divmod(keys, n_items)
    window = np.minimum(n_baskets, r) if r is not None else n_baskets  # [n]
    values = counts / window[rows]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    return sp.csr_matrix((values, items, indptr), shape=(n, n_items))


@dataclass(frozen=True)
class Pool:
    """The training customers UP-CF@r sums over.

    Shapes: sets [P, I] CSR (binary item sets), sizes [P] (|I_v|), users [P] (user index of each
    row, the key that keeps a customer out of its own sum).
    """

    sets: sp.csr_matrix
    sizes: np.ndarray
    users: np.ndarray
    histories: Histories
    max_baskets: int

    @classmethod
    def of(cls, data: BasketData, train: Instances) -> Pool:
        """Training instance (u, h): baskets 0..h of u are visible."""
        hist = data.histories(train.users, np.asarray(train.n_history) + 1)
        sets = item_sets(hist, data.n_items)
        n_baskets = np.diff(hist.basket_offsets)
        return cls(
            sets,
            np.diff(sets.indptr).astype(np.float64),
            np.asarray(train.users, dtype=np.int64),
            hist,
            int(n_baskets.max(initial=0)),
        )

    def popularity_by_item(self, n_items: int, r: int | None) -> sp.csr_matrix:
        """p_r of every pool row, item-major. Shapes: -> [I, P] CSR."""
        return popularity(self.histories, n_items, r).T.tocsr()

    def own_rows(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pool row, query position) of every pool row holding a query's own customer."""
        order = np.argsort(self.users, kind="stable")
        sorted_users = self.users[order]
        lo = np.searchsorted(sorted_users, users, side="left")
        hi = np.searchsorted(sorted_users, users, side="right")
        return order[ranges(lo, hi - lo)], np.repeat(np.arange(len(users)), hi - lo)


@dataclass(frozen=True)
class QueryChunk:
    """One chunk of queries: dense item sets transposed and what the weights need.

    Shapes: overlap [P, c] float64 (|I_u ∩ I_v|, pool-major), sizes [c] (|I_u|), own
    (pool rows, chunk columns) of the pairs left out.
    """

    rows: slice
    overlap: np.ndarray
    sizes: np.ndarray
    own: tuple[np.ndarray, np.ndarray]


def query_chunks(pool: Pool, sets: sp.csr_matrix, users: np.ndarray) -> Iterator[QueryChunk]:
    """The queries' overlaps with the pool, chunk after chunk."""
    n, n_items = sets.shape
    size = max(1, _CHUNK_ELEMENTS // max(n_items, len(pool.users), 1))
    sizes = np.diff(sets.indptr).astype(np.float64)
    for start in range(0, n, size):
        rows = slice(start, min(start + size, n))
        dense_t = np.ascontiguousarray(sets[rows].toarray().T)  # [I, c]
        overlap = pool.sets @ dense_t  # [P, c]
        yield QueryChunk(rows, overlap, sizes[rows], pool.own_rows(users[rows]))


def weights(chunk: QueryChunk, pool_sizes: np.ndarray, alpha: float, q: float) -> np.ndarray:
    """sim_α(u, v)^q for the chunk, 0 for a query's own pool rows. Shapes: -> [P, c] float64."""
    # Sizes of 0 have no overlap; 1 keeps 0 / 0 out.
    denom = np.power(np.maximum(pool_sizes, 1.0), 1.0 - alpha)[:, None] * np.power(
        np.maximum(chunk.sizes, 1.0), alpha
    )[None, :]
    w = chunk.overlap / denom
    if q != 1:
        np.power(w, q, out=w)
    w[chunk.own] = 0.0
    return w


def chunk_scores(
    w: np.ndarray, pool_popularity_t: sp.csr_matrix, own_popularity: sp.csr_matrix
) -> np.ndarray:
    """s(u, ·) of a chunk: the neighbour sum plus the query's own popularity.

    Shapes: w [P, c], pool_popularity_t [I, P], own_popularity [c, I] -> [c, I] float32.
    """
    neighbours = pool_popularity_t @ w  # [I, c]
    return (neighbours.T + own_popularity.toarray()).astype(np.float32)


class UpCf:
    """UP-CF@r next-basket recommender (see the module docstring for the formulas).

    Args:
        r: recency window in baskets (None: every basket).
        alpha: asymmetry of the cosine, in [0, 1] (0.5: the plain cosine of item sets).
        q: locality exponent, > 0 (larger: the most similar customers weigh more).
        tune: choose (r, alpha, q) on the validation instances when ``fit`` gets them.
        grid: tuning values per hyperparameter (keys of :data:`DEFAULT_GRID`), overriding the
            defaults key by key.
        tune_sample: tune on at most this many validation instances (None: all of them).
        seed: seed of the validation subsample.
        pool_cap: sum over at most this many training customers, a sample drawn with
            ``pool_seed`` (default 20,000: every customer below that; None: all of them; see
            ``scoring.tifu.capped_pool``).
        pool_seed: seed of that sample.
    """

    name = "up-cf"

    def __init__(
        self,
        *,
        r: int | None = 5,
        alpha: float = 0.25,
        q: float = 5,
        tune: bool = True,
        grid: dict[str, Sequence[Any]] | None = None,
        tune_sample: int | None = 2000,
        seed: int = 0,
        pool_cap: int | None = DEFAULT_POOL_CAP,
        pool_seed: int = 0,
    ) -> None:
        self.grid = tuning_grid(grid, DEFAULT_GRID)
        if any(len(values) == 0 for values in self.grid.values()):
            raise ValueError("every grid key needs at least one value")
        self.grid["r"] = tuple(_window(v) for v in self.grid["r"])
        for a, qq in product(self.grid["alpha"], self.grid["q"]):
            _check(a, qq)
        _check(alpha, q)
        if pool_cap is not None and pool_cap < 1:
            raise ValueError(f"pool_cap must be >= 1 or null (every customer), got {pool_cap}")
        self._initial = (_window(r), float(alpha), float(q))
        self.r, self.alpha, self.q = self._initial
        self.tune, self.tune_sample, self.seed = tune, tune_sample, seed
        self.pool_cap, self.pool_seed = pool_cap, pool_seed
        self.tuned = False
        self.validation_score: float | None = None
        self._pool: Pool | None = None
        self._pool_popularity_t: sp.csr_matrix | None = None
        self._n_items: int | None = None

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> UpCf:
        if len(train) == 0:
            raise ValueError("up-cf needs at least one training instance")
        self._n_items = data.n_items
        # Refitting starts again from the constructor's values, not from an earlier tuning.
        self.r, self.alpha, self.q = self._initial
        self.tuned, self.validation_score = False, None
        self._pool = Pool.of(data, capped_pool(train, self.pool_cap, self.pool_seed))
        if self.tune and validate is not None and len(validate) > 0:
            self._tune(data, validate)
        self._pool_popularity_t = self._pool.popularity_by_item(data.n_items, self.r)
        return self

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Shapes: -> [len(instances), data.n_items] float32."""
        if self._pool is None or self._pool_popularity_t is None:
            raise RuntimeError("up-cf: call fit() before score()")
        if data.n_items != self._n_items:
            raise ValueError(
                f"up-cf: fitted on {self._n_items} items but the data has {data.n_items}"
            )
        hist = data.histories(instances.users, instances.n_history)
        own = popularity(hist, data.n_items, self.r)
        out = np.empty((len(instances), data.n_items), dtype=np.float32)
        users = np.asarray(instances.users, dtype=np.int64)
        for chunk in query_chunks(self._pool, item_sets(hist, data.n_items), users):
            w = weights(chunk, self._pool.sizes, self.alpha, self.q)
            out[chunk.rows] = chunk_scores(w, self._pool_popularity_t, own[chunk.rows])
        return out

    def params(self) -> dict[str, Any]:
        return {
            "r": self.r,
            "alpha": self.alpha,
            "q": self.q,
            "tuned": self.tuned,
            "tune_sample": self.tune_sample,
            "pool_cap": self.pool_cap,
            "pool_seed": self.pool_seed,
            "validation_mean_ndcg@10,20": self.validation_score,
        }

    def _tune(self, data: BasketData, validate: Instances) -> None:
        assert self._pool is not None
        (self.r, self.alpha, self.q), self.validation_score = tune_up_cf(
            data, self._pool, validate, self.grid, self.tune_sample, self.seed
        )
        self.tuned = True


def tune_up_cf(
    data: BasketData,
    pool: Pool,
    validate: Instances,
    grid: dict[str, Sequence[Any]],
    sample: int | None = 2000,
    seed: int = 0,
) -> tuple[tuple[int | None, float, float], float]:
    """The grid search of the module docstring: ((r, alpha, q), validation mean NDCG@10,20).

    The overlaps of each chunk are computed once for the whole grid, the weights once per
    (alpha, q) and the pool popularities once per distinct window.
    """
    if sample is not None and len(validate) > sample:
        keep = np.sort(np.random.default_rng(seed).choice(len(validate), size=sample, replace=False))
        validate = Instances(validate.users[keep], validate.n_history[keep])
    ks = tuple(sorted({min(k, data.n_items) for k in TUNE_KS}))
    hist = data.histories(validate.users, validate.n_history)
    longest = max(pool.max_baskets, int(np.diff(hist.basket_offsets).max(initial=0)))
    # A window as long as every history is r = None; each distinct window is computed once.
    effective = {r: None if r is None or r >= longest else r for r in grid["r"]}
    windows = list(dict.fromkeys(effective.values()))
    pool_pop = {r: pool.popularity_by_item(data.n_items, r) for r in windows}
    own_pop = {r: popularity(hist, data.n_items, r) for r in windows}
    points = list(product(windows, grid["alpha"], grid["q"]))
    ranked = {p: np.empty((len(validate), ks[-1]), dtype=np.int64) for p in points}
    users = np.asarray(validate.users, dtype=np.int64)
    for chunk in query_chunks(pool, item_sets(hist, data.n_items), users):
        for alpha, q in product(grid["alpha"], grid["q"]):
            w = weights(chunk, pool.sizes, alpha, q)
            for r in windows:
                s = chunk_scores(w, pool_pop[r], own_pop[r][chunk.rows])
                ranked[r, alpha, q][chunk.rows] = top_k(s, ks[-1])
    targets = data.targets(validate.users, validate.n_history)
    value: dict[tuple[int | None, float, float], float] = {}
    for point, topk in ranked.items():
        metrics = ranking_metrics(topk, targets.values, targets.offsets, data.n_items, ks=ks)
        value[point] = float(np.mean([metrics[f"ndcg@{k}"] for k in ks]))
    best, best_point = -np.inf, (grid["r"][0], grid["alpha"][0], grid["q"][0])
    for r, alpha, q in product(grid["r"], grid["alpha"], grid["q"]):
        v = value[effective[r], alpha, q]
        if v > best:
            best, best_point = v, (r, alpha, q)
    r, alpha, q = best_point
    return (r, float(alpha), float(q)), best
