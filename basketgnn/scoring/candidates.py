"""Exact top-k of (fused) scores from a few candidates per customer, never a dense [n, I] matrix.

Many models score every item outside a customer's history the same way for every customer:
DNNTSP's gated scorer gives item i the shared score base_i unless i is one of the customer's own
items (:meth:`basketgnn.nn.gated_scorer.GatedScorer.node_scores`). Such scores are a
:class:`SharedScores`: one shared row plus a few entries per customer.

Fused with TIFU-KNN (:mod:`basketgnn.scoring.fusion`), customer u ranks item i by

    f_{u,i} = (1 − λ) · sigmoid(s_{u,i}) + a_{u,i}            (λ = 0: f = s, the model alone)

where the addend a = λ · q (+ ν · t with item transitions) is 0 outside the customer's kept
entries T_u. Let S_u = V_u ∪ T_u (own items and addend items). Outside S_u,
f_{u,i} = g_i := (1 − λ) · sigmoid(base_i) depends on the item only, so sort the catalogue once
by (g desc, item asc), the order of the ranking itself. Then:

    **the top k of customer u lie in S_u ∪ G_u, G_u = the first k items of that order not in S_u.**

Proof: an item outside S_u ∪ G_u has f = g and comes after all k items of G_u in the order
(g desc, item asc), so k items rank before it. No condition or fallback is needed: the ranking of
the |S_u| + k candidates by (f desc, item asc) is exactly the dense ranking, ties included, and
the values are computed with the same float64 operations as the dense fusion
(``fusion.fuse``: (1 − λ) · sigmoid(s), then + a), so scores agree bit for bit.

G_u is found without sorting per customer: with pos(i) the item's place in the global order and
L_u the shortest prefix holding k items outside S_u, L_u = k + |{j ∈ S_u : pos(j) < L_u}|, the
fixed point of L ← k + count(pos < L) from L = k (a few vectorised passes over S).

Shapes in this module: n customers, I items, k cut-off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from basketgnn.data.dataset import _offsets
from basketgnn.scoring.tifu import SparseScores


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(−x)) in float64, element by element with the same operations wherever an
    element sits in the array (torch's vectorised sigmoid rounds the tail of an array through
    another code path, so a value could differ in its last bit between a dense row and a
    candidate list). Shapes: any -> same, float64."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):  # exp(−x) = inf for x < −709: sigmoid 0, as it should be
        return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class SharedScores:
    """Scores [n, I] equal to one shared row except on a few entries per row:
    s[u, i] = values[j] for j in row u's entries with items[j] = i, else base[i].

    Shapes: base [I]; offsets [n + 1] int64; items [nnz] int64 (distinct within a row, any
    order); values [nnz] (base's dtype).
    """

    base: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row_ids(self) -> np.ndarray:
        """Shapes: -> [nnz] the row of each entry."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.offsets))

    def dense(self) -> np.ndarray:
        """The whole matrix (for references and small data). Shapes: -> [n, I]."""
        out = np.repeat(self.base[None, :], len(self), axis=0)
        out[self.row_ids(), self.items] = self.values
        return out


def fused_value(scores: np.ndarray, weight: float, addend: np.ndarray | None = None) -> np.ndarray:
    """f of the module docstring with exactly the dense fusion's float operations: the scores
    themselves when weight is 0, else (1 − weight) · sigmoid(scores) [+ addend].
    Shapes: scores [m], addend [m] or None -> [m] (float64 unless weight is 0)."""
    if weight == 0:
        return scores
    out = (1.0 - weight) * sigmoid(scores)
    if addend is not None:
        out = out + addend
    return out


def fused_top_k(
    scores: SharedScores,
    k: int,
    tifu: SparseScores | None = None,
    weight: float = 0.0,
    *,
    addend: SparseScores | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's top k of (1 − weight) · sigmoid(scores.dense()) + a, with the addend a =
    ``addend`` (already weighted: ``fusion.ScoreFusion.prepare``) or weight · ``tifu``
    (weight 0: of the scores themselves), best first, ties to the lower item: the same items
    and values as ``metrics.top_k`` on the dense fusion (``fusion.fuse``), from |S_u| + k
    candidates per row (module docstring).

    Shapes: scores of n rows over I items, tifu or addend of n rows (needed when weight > 0)
    -> (items [n, k] int64, values [n, k]: float64 when fused, the scores' dtype otherwise).
    """
    n, n_items = len(scores), len(scores.base)
    k = min(int(k), n_items)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if addend is None and tifu is not None and weight > 0:
        addend = tifu.scaled(weight)
    if weight > 0 and (addend is None or len(addend) != n):
        raise ValueError(f"TIFU scores for {0 if addend is None else len(addend)} rows, model scores for {n}")
    use_addend = weight > 0
    v_rows = scores.row_ids()  # [nnz_v]
    v_keys = v_rows * n_items + scores.items  # [nnz_v]
    v_order = np.argsort(v_keys, kind="stable")
    v_keys, v_rows, v_items, v_vals = v_keys[v_order], v_rows[v_order], scores.items[v_order], scores.values[v_order]

    if use_addend:
        assert addend is not None
        t_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(addend.offsets))  # [nnz_t]
        t_keys = t_rows * n_items + addend.items  # ascending: CSR rows with ascending items
        # The model's score at each addend entry: the row's own entry if any, else the shared one.
        at = np.minimum(np.searchsorted(v_keys, t_keys), max(len(v_keys) - 1, 0))
        own = (v_keys[at] == t_keys) if len(v_keys) else np.zeros(len(t_keys), bool)
        s_t = np.where(own, v_vals[at] if len(v_vals) else 0, scores.base[addend.items])
        f_t = fused_value(s_t, weight, addend.values)
        at = np.minimum(np.searchsorted(t_keys, v_keys), max(len(t_keys) - 1, 0))
        v_only = (t_keys[at] != v_keys) if len(t_keys) else np.ones(len(v_keys), bool)
        rows = np.concatenate([t_rows, v_rows[v_only]])
        items = np.concatenate([addend.items, v_items[v_only]])
        values = np.concatenate([f_t, fused_value(v_vals[v_only], weight)])
        shared = fused_value(scores.base, weight)  # [I]
    else:
        rows, items, values, shared = v_rows, v_items, v_vals, scores.base
    values = values.astype(np.float64, copy=False)

    order = np.lexsort((np.arange(n_items), -shared.astype(np.float64)))  # (g desc, item asc)
    pos = np.empty(n_items, np.int64)
    pos[order] = np.arange(n_items)
    item_pos = pos[items]  # [nnz_s]
    length = np.full(n, min(k, n_items), np.int64)
    while True:  # fixed point of L = k + |{j in S_u : pos(j) < L}|
        inside = item_pos < length[rows]
        new = np.minimum(k + np.bincount(rows[inside], minlength=n), n_items)
        if np.array_equal(new, length):
            break
        length = new
    width = int(length.max()) if n else 0
    taken = np.zeros((n, width), bool)
    taken[rows[inside], item_pos[inside]] = True
    free = ~taken & (np.arange(width)[None, :] < length[:, None])  # [n, width]: G_u
    g_rows, g_pos = np.nonzero(free)

    # Candidate matrix: row u holds S_u then G_u, padded with −inf.
    s_count = np.bincount(rows, minlength=n)
    g_count = np.bincount(g_rows, minlength=n)
    cols = int((s_count + g_count).max()) if n else 0
    cand_val = np.full((n, max(cols, k)), -np.inf)
    cand_item = np.full((n, max(cols, k)), n_items, np.int64)
    s_sorted = np.argsort(rows, kind="stable")
    s_col = np.arange(len(rows)) - _offsets(s_count)[rows[s_sorted]]
    cand_val[rows[s_sorted], s_col] = values[s_sorted]
    cand_item[rows[s_sorted], s_col] = items[s_sorted]
    g_col = s_count[g_rows] + np.arange(len(g_rows)) - _offsets(g_count)[g_rows]
    cand_val[g_rows, g_col] = shared[order[g_pos]]
    cand_item[g_rows, g_col] = order[g_pos]

    chosen = rank_rows(cand_val, cand_item, k)  # [n, k]
    out_items = np.take_along_axis(cand_item, chosen, axis=1)
    out_vals = np.take_along_axis(cand_val, chosen, axis=1)
    return out_items, out_vals.astype(values.dtype if use_addend else scores.base.dtype)


def rank_rows(values: np.ndarray, items: np.ndarray, k: int) -> np.ndarray:
    """Columns of each row's k best entries by (value desc, item asc), best first.

    Shapes: values [n, W] float, items [n, W] int64 (distinct within a row; padding: −inf
    values) -> [n, k] int64 column indices.
    """
    n, width = values.shape
    if width <= k or width <= 32:
        return np.lexsort((items, -values), axis=1)[:, :k]
    best, cols = torch.topk(torch.from_numpy(values), k, dim=1)  # any k of the best
    kth = best[:, -1:].numpy()  # [n, 1]
    cols = cols.numpy()
    # Where entries equal to the k-th value straddle the cut, the lower items must win.
    tied = np.flatnonzero((values >= kth).sum(axis=1) > k)
    if len(tied):
        cols[tied] = np.lexsort((items[tied], -values[tied]), axis=1)[:, :k]
    in_order = np.lexsort((np.take_along_axis(items, cols, 1), -np.take_along_axis(values, cols, 1)), axis=1)
    return np.take_along_axis(cols, in_order, axis=1)
