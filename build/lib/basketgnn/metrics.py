"""Vectorised top-K ranking metrics for next-basket recommendation.

For every test user, ``T`` is the target set (the items of the next basket, duplicates
collapsed) and ``R`` the list of the top-``K`` ranked items, best first. For each ``K``:

* ``Recall@K = |R ∩ T| / |T|``
* ``NDCG@K = DCG / IDCG`` with
  ``DCG = Σ_{r=1..K} [R_r ∈ T] / log2(r + 1)`` and
  ``IDCG = Σ_{r=1..min(K, |T|)} 1 / log2(r + 1)``
* ``PHR@K = 1 if |R ∩ T| > 0 else 0`` (personal hit ratio)

Each metric is averaged over users.

Repeat / explore variants: with ``H`` the set of items in the user's history,
``T_rep = T ∩ H`` and ``T_exp = T \\ H``. ``repeat_{recall,ndcg,phr}@K`` use the same
formulas with ``T`` replaced by ``T_rep`` (``R`` unchanged), averaged only over users whose
``T_rep`` is non-empty; ``explore_*`` likewise with ``T_exp``. When no user has a non-empty
``T_rep`` (resp. ``T_exp``) the corresponding values are NaN.

Per-user item lists (targets, histories) are passed in CSR layout: a flat ``items`` array plus
``offsets`` of length ``n_users + 1``, user ``u`` owning ``items[offsets[u]:offsets[u + 1]]``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

KS: tuple[int, ...] = (10, 20, 30, 40)

_BASE_METRICS: tuple[str, ...] = ("recall", "ndcg", "phr")

# Bounds the temporaries of ``top_k`` (a few arrays of this many elements per chunk), so memory
# stays flat however many users are scored at once.
_TOP_K_CHUNK_ELEMENTS = 1 << 22


def usable_ks(ks: tuple[int, ...], n_items: int) -> tuple[int, ...]:
    """The cut-offs that fit the catalogue: a catalogue of 30 items has no top 40."""
    fitting = tuple(k for k in ks if k <= n_items)
    return fitting or (n_items,)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores per row, best first.

    Ties are broken deterministically by the lower item index first, i.e. the result equals
    ``np.argsort(-scores, axis=1, kind="stable")[:, :k]`` but costs ``O(n_items)`` per user
    instead of a full sort.

    Parameters
    ----------
    scores
        Real-valued scores; higher is better. Must not contain NaN.
    k
        Number of items to return per user, ``1 <= k <= n_items``.

    Returns
    -------
    numpy.ndarray
        ``int64`` item indices, best first.

    Shapes
    ------
    * ``scores``: ``[n_users, n_items]``
    * return: ``[n_users, k]``

    Raises
    ------
    ValueError
        If ``scores`` is not 2-D, contains NaN, or ``k`` is out of range.
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D [n_users, n_items], got shape {scores.shape}")
    n_users, n_items = scores.shape
    k = int(k)
    if not 1 <= k <= n_items:
        raise ValueError(f"k must be in [1, n_items={n_items}], got {k}")
    if not np.issubdtype(scores.dtype, np.floating):
        # Negation below would wrap unsigned ints; float64 is exact for realistic int scores.
        scores = scores.astype(np.float64)
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN; ranking would be ill-defined")

    out = np.empty((n_users, k), dtype=np.int64)
    chunk = max(1, _TOP_K_CHUNK_ELEMENTS // max(n_items, 1))
    for start in range(0, n_users, chunk):
        stop = min(start + chunk, n_users)
        out[start:stop] = _top_k_chunk(scores[start:stop], k)
    return out


def _top_k_chunk(scores: np.ndarray, k: int) -> np.ndarray:
    """``top_k`` for one block of users (see there); shapes ``[b, n_items] -> [b, k]``."""
    # torch's top-k gives the k best of each row about 4x faster than np.partition. Where the
    # k-th value is not tied with an item left out, its set is the answer; it is only put in
    # order (score descending, then lower item index). Rows with ties straddling the cut-off
    # (count of items >= the k-th value above k) take the exact rule: everything strictly
    # above the k-th value is in, and the lowest-index items equal to it fill the rest.
    values, cols = torch.topk(torch.from_numpy(np.ascontiguousarray(scores)), k, dim=1)
    kth = values[:, -1:].numpy()  # [b, 1]
    cols = cols.numpy()  # [b, k]
    overflow = np.flatnonzero((scores >= kth).sum(axis=1) > k)
    if overflow.size:
        sub, sub_kth = scores[overflow], kth[overflow]
        above = sub > sub_kth
        tied = sub == sub_kth
        n_free = k - above.sum(axis=1, keepdims=True)
        selected = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= n_free))
        # nonzero walks row-major: every row yields exactly k columns.
        cols[overflow] = np.nonzero(selected)[1].reshape(len(overflow), k)
    sel_scores = np.take_along_axis(scores, cols, axis=1)
    # Sort by column first, then stably by score: lower indices first among equal scores.
    by_col = np.argsort(cols, axis=1)
    cols, sel_scores = np.take_along_axis(cols, by_col, 1), np.take_along_axis(sel_scores, by_col, 1)
    order = np.argsort(-sel_scores, axis=1, kind="stable")
    return np.take_along_axis(cols, order, axis=1)


def _as_int_array(name: str, arr: np.ndarray) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _csr_keys(
    name: str, items: np.ndarray, offsets: np.ndarray, n_users: int, n_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """Validate a CSR item list and encode it as sorted unique ``user * n_items + item`` keys.

    Returns
    -------
    keys, sizes
        Sorted unique keys (duplicates within a user collapsed) and the per-user set size.

    Shapes
    ------
    * ``items``: ``[nnz]``; ``offsets``: ``[n_users + 1]``
    * return: ``keys`` ``[n_unique]``, ``sizes`` ``[n_users]``
    """
    items = _as_int_array(f"{name}_items", items)
    offsets = _as_int_array(f"{name}_offsets", offsets)
    if offsets.shape[0] != n_users + 1:
        raise ValueError(
            f"{name}_offsets must have length n_users + 1 = {n_users + 1}, got {offsets.shape[0]}"
        )
    if offsets[0] != 0 or offsets[-1] != items.shape[0]:
        raise ValueError(
            f"{name}_offsets must start at 0 and end at len({name}_items) = {items.shape[0]}, "
            f"got {offsets[0]} and {offsets[-1]}"
        )
    lengths = np.diff(offsets)
    if (lengths < 0).any():
        raise ValueError(f"{name}_offsets must be non-decreasing")
    if items.size and (items.min() < 0 or items.max() >= n_items):
        raise ValueError(f"{name}_items must lie in [0, n_items={n_items})")
    users = np.repeat(np.arange(n_users, dtype=np.int64), lengths)
    keys = np.unique(users * n_items + items)
    sizes = np.bincount(keys // n_items, minlength=n_users)
    return keys, sizes


def _isin_sorted(query: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Elementwise membership of ``query`` in the sorted unique ``sorted_keys`` (any shape)."""
    if sorted_keys.size == 0:
        return np.zeros(query.shape, dtype=bool)
    pos = np.searchsorted(sorted_keys, query)
    np.minimum(pos, sorted_keys.size - 1, out=pos)
    return sorted_keys[pos] == query


def _metrics_from_hits(
    hits: np.ndarray, sizes: np.ndarray, ks: tuple[int, ...], prefix: str
) -> dict[str, float]:
    """Average recall/NDCG/PHR over users with a non-empty target from a boolean hit matrix.

    Shapes
    ------
    * ``hits``: ``[n_users, k_max]``, ``hits[u, r]`` = rank ``r + 1`` item of ``u`` is a target
    * ``sizes``: ``[n_users]`` target-set sizes
    """
    k_max = hits.shape[1]
    discounts = 1.0 / np.log2(np.arange(2, k_max + 2, dtype=np.float64))
    ideal_cum = np.cumsum(discounts)
    valid = sizes > 0
    out: dict[str, float] = {}
    if not valid.any():
        for k in ks:
            for m in _BASE_METRICS:
                out[f"{prefix}{m}@{k}"] = math.nan
        return out
    hits = hits[valid]
    sizes = sizes[valid]
    n_hits_cum = np.cumsum(hits, axis=1)
    dcg_cum = np.cumsum(hits * discounts, axis=1)
    for k in ks:
        n_hits = n_hits_cum[:, k - 1]
        idcg = ideal_cum[np.minimum(sizes, k) - 1]
        out[f"{prefix}recall@{k}"] = float(np.mean(n_hits / sizes))
        out[f"{prefix}ndcg@{k}"] = float(np.mean(dcg_cum[:, k - 1] / idcg))
        out[f"{prefix}phr@{k}"] = float(np.mean(n_hits > 0))
    return out


def ranking_metrics(
    topk: np.ndarray,
    target_items: np.ndarray,
    target_offsets: np.ndarray,
    n_items: int,
    history_items: np.ndarray | None = None,
    history_offsets: np.ndarray | None = None,
    ks: tuple[int, ...] = KS,
) -> dict[str, float]:
    """Recall, NDCG and PHR at each cut-off, optionally split into repeat / explore targets.

    Fully vectorised over users: membership of every ranked item in its user's target (and
    history) is tested with sorted ``user * n_items + item`` keys, and the per-``K`` values are
    read off cumulative sums along the ranking. No dense ``[n_users, n_items]`` array is built.

    Parameters
    ----------
    topk
        Ranked item indices per user, best first (e.g. from :func:`top_k`). Entries within a
        row must be distinct.
    target_items, target_offsets
        CSR target baskets; every user must have at least one target item. Duplicate ids inside
        one target are treated as a set.
    n_items
        Size of the item vocabulary; all item ids must lie in ``[0, n_items)``.
    history_items, history_offsets
        Optional CSR histories (duplicates allowed, empty histories allowed). When given, the
        ``repeat_*`` and ``explore_*`` metrics are added.
    ks
        Cut-offs; each must satisfy ``1 <= K <= k_max``.

    Returns
    -------
    dict[str, float]
        ``f"{m}@{k}"`` for ``m`` in ``recall, ndcg, phr`` and each ``k``; with a history also
        ``f"repeat_{m}@{k}"`` and ``f"explore_{m}@{k}"`` (NaN if no user has such targets).

    Shapes
    ------
    * ``topk``: ``[n_users, k_max]`` with ``k_max >= max(ks)``
    * ``target_items``: ``[n_target_entries]``; ``target_offsets``: ``[n_users + 1]``
    * ``history_items``: ``[n_history_entries]``; ``history_offsets``: ``[n_users + 1]``

    Raises
    ------
    ValueError
        On an empty target, ``k_max < max(ks)``, inconsistent shapes or offsets, item ids out of
        range, repeated items within a ranking row, or only one of the two history arrays.
    """
    n_items = int(n_items)
    if n_items < 1:
        raise ValueError(f"n_items must be positive, got {n_items}")
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be a non-empty tuple of positive ints, got {ks}")
    topk = np.asarray(topk)
    if topk.ndim != 2:
        raise ValueError(f"topk must be 2-D [n_users, k_max], got shape {topk.shape}")
    n_users, k_max = topk.shape
    if n_users == 0:
        raise ValueError("topk has no users")
    if k_max < max(ks):
        raise ValueError(f"topk has k_max={k_max} columns but max(ks)={max(ks)}")
    if not np.issubdtype(topk.dtype, np.integer):
        raise ValueError(f"topk must have an integer dtype, got {topk.dtype}")
    # Columns beyond max(ks) never influence any metric.
    ranked = topk[:, : max(ks)].astype(np.int64, copy=False)
    if ranked.min() < 0 or ranked.max() >= n_items:
        raise ValueError(f"topk entries must lie in [0, n_items={n_items})")
    if ranked.shape[1] > 1 and (np.diff(np.sort(ranked, axis=1), axis=1) == 0).any():
        # A repeated item would be counted twice and push recall/NDCG above 1.
        raise ValueError("topk rows must not contain repeated items")
    if (history_items is None) != (history_offsets is None):
        raise ValueError("history_items and history_offsets must be given together")

    target_keys, target_sizes = _csr_keys("target", target_items, target_offsets, n_users, n_items)
    empty = np.flatnonzero(target_sizes == 0)
    if empty.size:
        raise ValueError(
            f"{empty.size} user(s) have an empty target, e.g. user {int(empty[0])}; "
            "metrics are undefined for them"
        )

    ranked_keys = np.arange(n_users, dtype=np.int64)[:, None] * n_items + ranked
    hits = _isin_sorted(ranked_keys, target_keys)
    out = _metrics_from_hits(hits, target_sizes, ks, prefix="")
    if history_items is None:
        return out

    history_keys, _ = _csr_keys("history", history_items, history_offsets, n_users, n_items)
    target_is_repeat = _isin_sorted(target_keys, history_keys)
    target_users = target_keys // n_items
    repeat_sizes = np.bincount(target_users[target_is_repeat], minlength=n_users)
    explore_sizes = target_sizes - repeat_sizes
    # A hit is a repeat hit exactly when the ranked item is also in the history.
    ranked_in_history = _isin_sorted(ranked_keys, history_keys)
    out |= _metrics_from_hits(hits & ranked_in_history, repeat_sizes, ks, prefix="repeat_")
    out |= _metrics_from_hits(hits & ~ranked_in_history, explore_sizes, ks, prefix="explore_")
    return out


def metrics_table(metrics: dict[str, float], ks: tuple[int, ...] = KS) -> list[list[str]]:
    """Lay out a :func:`ranking_metrics` result as text rows for printing.

    The first row is the header (``"metric"`` then ``"@K"`` per cut-off); each further row is
    one metric family present in ``metrics`` (``recall``, ``ndcg``, ``phr``, then the
    ``repeat_`` and ``explore_`` variants), values formatted to 4 decimals, ``"-"`` if missing.

    Shapes
    ------
    * return: ``[1 + n_present_metrics][1 + len(ks)]``
    """
    header = ["metric", *(f"@{k}" for k in ks)]
    rows = [header]
    for prefix in ("", "repeat_", "explore_"):
        for m in _BASE_METRICS:
            name = f"{prefix}{m}"
            if not any(f"{name}@{k}" in metrics for k in ks):
                continue
            cells = [name]
            for k in ks:
                value = metrics.get(f"{name}@{k}")
                cells.append("-" if value is None else f"{value:.4f}")
            rows.append(cells)
    return rows
