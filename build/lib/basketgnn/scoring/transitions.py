"""Item transitions: what customers buy in the basket right after one that held an item.

A global, sequential item graph learnt by counting, used by the score fusion
(:mod:`basketgnn.scoring.fusion`) as a personalised score for items a customer has not bought
(on TaFeng about 80% of target items are new to the customer, and the trained models rank
those by a global score alone).

**Matrix.** Over the pool (each training instance's history *and* target basket, the same
customers as TIFU-KNN's pool), with x_{u,t} the multi-hot vector of customer u's basket t:

    N = Σ_u Σ_t x_{u,t}ᵀ x_{u,t+1}                     [I, I]   (i bought, then j in the next basket)
    S_ij = N_ij / sqrt(d_i · d_j),   d_i = 1 + number of pool baskets holding i

(the diagonal is kept: "bought i, then i again"). Each row keeps its ``row_top`` largest
entries (ties: the lower item), so the matrix holds at most I · row_top entries.

**Score.** A customer with history baskets x_1 … x_T (time order) is the decayed sum

    h_u = Σ_t decay^(T − t) · x_t                      (the last basket has weight 1)

and its transition score is t_u = h_u S [I]. With ``explore_only`` the customer's own items are
set to 0 (the score then only ranks new items). Each row keeps its ``top`` largest positive
entries divided by its largest one, so t is in (0, 1] like TIFU-KNN's fused score
(:class:`basketgnn.scoring.sparse.SparseScores`).

**Known bias on temporal splits.** The pool holds each training instance's baskets up to its
target, and on a temporal split the validation customers are those same customers one basket
later: S counts every transition of a validation customer's history, while at test time the
last one (train target → validation target) is missing from S. No target basket reaches S,
but the validation choice of ν may be slightly optimistic there. DC and TaFeng's predefined
splits hold disjoint customers, so they are not affected.

Shapes in this module: n query instances, I items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from basketgnn.data.dataset import BasketData, Histories, _offsets
from basketgnn.data.split import Instances
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.transitions_kernel import transition_kept_scores

#: Entries kept per row of the transition matrix (memory: at most I · ROW_TOP entries).
#: TaFeng's rows hold 270 entries on average: 1000 keeps almost all of them.
ROW_TOP = 1000
#: Entries of a customer's transition score kept (as TIFU's ``top``).
SCORE_TOP = 200


@dataclass(frozen=True)
class TransitionOption:
    """How a customer's transition score is read: the history decay and whether own items are
    left out. ``name`` is what choices and logs show."""

    decay: float
    explore_only: bool

    @property
    def name(self) -> str:
        return f"decay {self.decay:g}{', new items only' if self.explore_only else ''}"


#: The options the fusion tries on validation: decay 0.5 with every item (the better one on
#: TaFeng) and decay 0.9 on new items only (the better one on DC).
OPTIONS: tuple[TransitionOption, ...] = (TransitionOption(0.5, False), TransitionOption(0.9, True))


def _basket_matrix(histories: Histories, n_items: int) -> sp.csr_matrix:
    """Multi-hot rows, one per basket (duplicates inside a basket count once).

    Shapes: -> [number of baskets, I] float64 CSR.
    """
    b = histories.baskets
    rows = b.row_ids()
    m = sp.csr_matrix((np.ones(len(rows)), (rows, b.values.astype(np.int64))), shape=(b.n_rows, n_items))
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


def _keep_row_top(m: sp.csr_matrix, top: int) -> sp.csr_matrix:
    """Each row's ``top`` largest entries (ties: the lower column), columns ascending."""
    m = m.tocsr()
    m.sort_indices()
    lengths = np.diff(m.indptr)
    if lengths.max(initial=0) <= top:
        return m
    row = np.repeat(np.arange(m.shape[0]), lengths)
    # Within each row: value descending, column ascending; keep the first `top`.
    order = np.lexsort((m.indices, -m.data, row))
    rank = np.arange(len(order)) - m.indptr[row[order]]
    keep = np.sort(order[rank < top])
    kept_rows = row[keep]
    return sp.csr_matrix(
        (m.data[keep], m.indices[keep], _offsets(np.bincount(kept_rows, minlength=m.shape[0]))),
        shape=m.shape,
    )


class TransitionScorer:
    """The transition matrix S of a pool and the transition score of any instance.

    Args:
        matrix: S, [I, I] CSR (values rounded to float32, held as float64).
    """

    def __init__(self, matrix: sp.csr_matrix) -> None:
        if matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"a transition matrix is square, got {matrix.shape}")
        matrix = matrix.tocsr().astype(np.float64)
        # Kept at float32 precision (as the checkpoint stores it), so a loaded scorer scores
        # exactly as the one that was chosen on validation.
        matrix.data = matrix.data.astype(np.float32).astype(np.float64)
        self.matrix = matrix
        # The kernel's copy: int32 items and float32 values (exact: the values are float32's),
        # half the memory traffic of the product.
        self._kernel_matrix = (
            np.asarray(matrix.indptr, np.int64), np.asarray(matrix.indices, np.int32),
            matrix.data.astype(np.float32),
        )

    @property
    def n_items(self) -> int:
        return int(self.matrix.shape[0])

    @classmethod
    def build(cls, data: BasketData, pool: Instances, row_top: int = ROW_TOP) -> TransitionScorer:
        """S from the pool instances' history and target baskets (module docstring)."""
        if row_top < 1:
            raise ValueError(f"row_top must be >= 1, got {row_top}")
        visible = data.histories(pool.users, np.asarray(pool.n_history) + 1)
        x = _basket_matrix(visible, data.n_items)  # [B, I]
        last = visible.basket_offsets[1:] - 1  # [n] each instance's last basket
        first = np.ones(x.shape[0], bool)
        first[last] = False  # baskets that have a next one within their instance
        before = np.flatnonzero(first)
        counts = (x[before].T @ x[before + 1]).tocsr()  # [I, I] N
        d = 1.0 + np.asarray(x.sum(axis=0)).ravel()  # [I]
        scale = sp.diags(1.0 / np.sqrt(d))
        return cls(_keep_row_top(scale @ counts @ scale, row_top))

    def scores(
        self, data: BasketData, instances: Instances, option: TransitionOption, top: int = SCORE_TOP
    ) -> SparseScores:
        """Each instance's transition score from its history baskets: the ``top`` largest
        positive entries over the row's largest (module docstring).

        Shapes: -> SparseScores of len(instances) rows, values in (0, 1].
        """
        if data.n_items != self.n_items:
            raise ValueError(f"transition matrix has {self.n_items} items but the data {data.n_items}")
        if not 0.0 <= option.decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {option.decay}")
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        users = np.asarray(instances.users)
        n_history = np.asarray(instances.n_history)
        top = min(top, data.n_items)
        hist = data.histories(users, n_history)
        n_baskets = np.diff(hist.basket_offsets)  # [n]
        owner = np.repeat(np.arange(len(users)), n_baskets)  # [B]
        age = hist.basket_offsets[owner + 1] - 1 - np.arange(len(owner))  # [B] 0 = last
        offsets, items, values = transition_kept_scores(
            hist.basket_offsets, np.asarray(hist.baskets.offsets, np.int64),
            np.asarray(hist.baskets.values, np.int64), np.power(float(option.decay), age),
            *self._kernel_matrix, option.explore_only, top, data.n_items,
        )  # fmt: skip
        return SparseScores.from_buffers(offsets, items, values)

    def state(self) -> dict[str, Any]:
        m = self.matrix
        return {
            "indptr": m.indptr.astype(np.int64), "indices": m.indices.astype(np.int32),
            "values": m.data.astype(np.float32), "n_items": self.n_items,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TransitionScorer:
        n = int(state["n_items"])
        m = sp.csr_matrix(
            (np.asarray(state["values"], np.float64), np.asarray(state["indices"]), np.asarray(state["indptr"])),
            shape=(n, n),
        )
        return cls(m)
