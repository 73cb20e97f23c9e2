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

G_u is found without sorting per customer: walk the global order, skipping S_u's items, until
k items are taken (``topk_kernel.candidate_top_k``, customer by customer, the best k kept in a sorted
list as they come).

Shapes in this module: n customers, I items, k cut-off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.topk_kernel import candidate_top_k


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

    def rows(self, start: int, stop: int) -> SharedScores:
        """Rows start..stop-1 as their own SharedScores (views: nothing is copied but the
        offsets)."""
        lo, hi = self.offsets[start], self.offsets[stop]
        return SharedScores(self.base, self.offsets[start : stop + 1] - lo, self.items[lo:hi], self.values[lo:hi])

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
    shared = fused_value(scores.base, weight).astype(np.float64, copy=False)  # [I]
    own = fused_value(scores.values, weight).astype(np.float64, copy=False)  # [nnz]
    if use_addend:
        assert addend is not None
        add_ptr, add_items, add_values = addend.offsets, addend.items, addend.values.astype(np.float64, copy=False)
    else:
        add_ptr, add_items, add_values = np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    order = np.lexsort((np.arange(n_items), -shared))  # (g desc, item asc)
    items, values = candidate_top_k(
        shared, order, scores.offsets, np.asarray(scores.items, np.int64), own, add_ptr,
        np.asarray(add_items, np.int64), add_values, k,
    )  # fmt: skip
    return items, values.astype(np.float64 if use_addend else scores.base.dtype)
