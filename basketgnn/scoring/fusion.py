"""Fusing any model's scores with TIFU-KNN's whole score: :class:`ScoreFusion`, the fusion
chosen on validation (:mod:`basketgnn.scoring.fusion_choice`), and how it fuses.

For a customer u and item i, with s_{u,i} the trained model's score and t_{u,i} TIFU-KNN's score
(:mod:`basketgnn.scoring.tifu`: α · own decayed frequency + (1 − α) · neighbour mean), both are
put on a rank-compatible [0, 1] scale per customer,

    p_{u,i} = sigmoid(s_{u,i})                        (transform "sigmoid", for logits), or
    p_{u,i} = (s_{u,i} − min_j s_{u,j}) / (max_j s_{u,j} − min_j s_{u,j})   ("minmax", any score)
    q_{u,i} = t_{u,i} / max_j t_{u,j}                 (0 for a customer with no TIFU score)

and items are ranked by the convex combination

    f_{u,i} = (1 − λ) · p_{u,i} + λ · q_{u,i}   [+ ν · t_{u,i}].

λ = 0 is the model alone (its own scores are returned untouched) and λ = 1 is TIFU-KNN alone
(its ranking, tie for tie, over the kept entries). The optional third term (``transitions``)
is the customer's item-transition score t in (0, 1] (:mod:`basketgnn.scoring.transitions`:
what the pool's customers buy in the basket after one holding the customer's items), a
personalised score for items the customer has not bought; its weight ν and how t is read
(history decay, new items only or not) are chosen with λ, for λ > 0 at TIFU's tuned α.

Only each customer's ``top`` largest entries of q are kept (CSR), so memory is O(n · top) and
not O(n · I); λ = 1 therefore equals TIFU-KNN's ranking on the first ``top`` positions. The
TIFU pool (training customers over their whole visible sequence) is keyed by customer id: pool
rows with the query's own id are never its neighbours, so on a temporal split no target basket
of the customer reaches its scores. Scores are fused ``chunk`` rows at a time.

:class:`ScoreFusion` is model-agnostic and picklable: ``prepare`` runs the neighbour search
(it can run in a thread beside the model's scoring), ``apply`` fuses, ``state`` /
``from_state`` go through a checkpoint as plain arrays and numbers.

Shapes in this module: n instances, P pool customers, I items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from basketgnn.data.dataset import BasketData, _offsets
from basketgnn.data.split import Instances
from basketgnn.scoring.candidates import SharedScores, fused_top_k, sigmoid
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import (
    NeighbourIndex,
    SparseRows,
    TifuParams,
    capped_pool,
    customer_vectors,
    pool_codes,
    pool_vectors,
    query_codes,
)
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer

#: TIFU entries kept per customer.
DEFAULT_TOP = 200
#: Rows fused at a time (memory: chunk x I float64).
DEFAULT_CHUNK = 2048

Transform = Literal["sigmoid", "minmax"]


class TifuScorer:
    """TIFU-KNN's score of any instance from a fixed pool of training customers.

    Args:
        vectors: pool vectors, SparseRows [P, I] (built with ``params``' m, r_b, r_g).
        customer_ids: [P] customer id of each pool row (never a neighbour of the same id).
        params: TIFU hyperparameters.
        top: entries kept per instance.
    """

    def __init__(self, vectors: SparseRows, customer_ids: np.ndarray, params: TifuParams, top: int) -> None:
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        self.vectors, self.params, self.top = vectors, params, int(top)
        self.customer_ids = np.asarray(customer_ids).astype(str)
        self._distinct_ids, codes = pool_codes(self.customer_ids)  # sorted ids: query_codes reads them
        # float64 search: the same neighbours as TifuKnn, tie for tie.
        self._index = NeighbourIndex(vectors, codes, dtype=np.float64)
        self._held: sp.csr_matrix | None = None

    @classmethod
    def build(cls, data: BasketData, train: Instances, params: TifuParams, top: int = DEFAULT_TOP) -> TifuScorer:
        """The pool of ``train``'s customers (capped: ``params.pool_cap``), each over its history
        and target basket."""
        pool = capped_pool(train, params.pool_cap, params.pool_seed)
        vectors = pool_vectors(data, pool, params.m, params.r_b, params.r_g)
        return cls(vectors, data.user_ids[pool.users], params, top)

    def scores(
        self, data: BasketData, instances: Instances, alphas: Sequence[float] | None = None,
        exact_sums: bool = False,
    ) -> dict[float, SparseScores]:
        """Each instance's TIFU score from its history baskets, per α (default: the params'
        α): the ``top`` largest entries, divided by the instance's largest one (so in (0, 1]).
        ``exact_sums``: the neighbour means summed as the batch formulation sums them (the
        same bits); else from the pool's common rows (``NeighbourIndex.kept_scores``: equal up
        to float64 rounding, and cheaper).

        Shapes: -> {α: SparseScores of len(instances) rows}.
        """
        if data.n_items != self.vectors.n_cols:
            raise ValueError(f"TIFU pool has {self.vectors.n_cols} items but the data {data.n_items}")
        alphas = tuple(alphas) if alphas is not None else (self.params.alpha,)
        p = self.params
        own = customer_vectors(data.histories(instances.users, instances.n_history), data.n_items, p.m, p.r_b, p.r_g)
        codes = query_codes(self._distinct_ids, data.user_ids[instances.users])
        # float64 values: dividing TifuKnn's float32 scores keeps distinct values distinct.
        return self._index.kept_scores(own, codes, p.k, alphas, min(self.top, data.n_items), exact_sums)

    def neighbours(self, data: BasketData, instances: Instances) -> tuple[SparseRows, np.ndarray]:
        """Each instance's TIFU vector from its history and the k pool rows :meth:`scores`
        averages (ascending rows, -1 pads), for the reasons given with a recommendation.

        Shapes: -> (SparseRows [n, I], [n, k] int64 pool rows)."""
        p = self.params
        own = customer_vectors(data.histories(instances.users, instances.n_history), data.n_items, p.m, p.r_b, p.r_g)
        codes = query_codes(self._distinct_ids, data.user_ids[instances.users])
        return own, self._index.kernel_neighbours(own, codes, p.k)

    def neighbour_share(self, neighbours: np.ndarray) -> np.ndarray:
        """The share of each row's neighbours (-1 entries ignored) whose pool vector holds each
        item. Shapes: neighbours [n, k] -> [n, I] float64."""
        valid = neighbours >= 0
        count = np.maximum(valid.sum(axis=1), 1)
        row, slot = np.nonzero(valid)
        weights = sp.csr_matrix(
            (1.0 / count[row], neighbours[row, slot], _offsets(np.bincount(row, minlength=len(neighbours)))),
            shape=(len(neighbours), self.vectors.n_rows),
        )
        if self._held is None:  # 1 where a pool vector holds the item
            v = self.vectors
            self._held = sp.csr_matrix((np.ones(len(v.indices)), v.indices, v.indptr), shape=(v.n_rows, v.n_cols))
        return (weights @ self._held).toarray()

    def neighbour_mean(self, neighbours: np.ndarray) -> np.ndarray:
        """The mean pool vector of each row's neighbours. Shapes: [n, k] -> [n, I] float64."""
        return self._index.mean(neighbours)

    def state(self) -> dict[str, Any]:
        v = self.vectors
        return {
            "indptr": v.indptr, "indices": v.indices, "values": v.values, "n_items": v.n_cols,
            "customer_ids": self.customer_ids.tolist(), "params": asdict(self.params), "top": self.top,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TifuScorer:
        vectors = SparseRows(
            np.asarray(state["indptr"]), np.asarray(state["indices"]),
            np.asarray(state["values"]), int(state["n_items"]),
        )
        return cls(vectors, np.asarray(state["customer_ids"], dtype=str), TifuParams(**state["params"]), state["top"])


def normalise(scores: np.ndarray, transform: Transform) -> np.ndarray:
    """The model's scores on a [0, 1] scale, order kept within each row, in float64 (in
    float32 every logit above ~16.6 would have sigmoid exactly 1.0).

    Shapes: [n, I] -> [n, I] float64.
    """
    x = np.asarray(scores, dtype=np.float64)
    if transform == "sigmoid":
        return sigmoid(x)
    if transform == "minmax":
        lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
        return (x - lo) / np.where(hi > lo, hi - lo, 1.0)
    raise ValueError(f"unknown transform {transform!r}; use 'sigmoid' or 'minmax'")


def fuse(
    scores: np.ndarray,
    tifu: SparseScores | None,
    weight: float,
    transform: Transform,
    *,
    addend: SparseScores | None = None,
) -> np.ndarray:
    """(1 − weight) · normalise(scores) + a, with the addend a = ``addend`` (already weighted:
    λ · q + ν · t, :meth:`ScoreFusion.prepare`) or weight · ``tifu`` (module docstring);
    weight 0 returns the model's scores as given and weight 1 the addend alone.

    Shapes: scores [n, I], tifu / addend of n rows -> [n, I] (float64 unless weight is 0).
    """
    if weight == 0:
        return scores
    if addend is None and tifu is not None:
        addend = tifu.scaled(weight)
    return fuse_normalised(scores, None if weight == 1 else normalise(scores, transform), addend, weight)


def fuse_normalised(
    scores: np.ndarray, normalised: np.ndarray | None, addend: SparseScores | None, weight: float
) -> np.ndarray:
    """:func:`fuse` for 0 < weight with ``normalised`` = normalise(scores) made once (None when
    weight is 1) and the weighted ``addend``. Shapes: [n, I] -> [n, I] float64."""
    if addend is None or len(addend) != len(scores):
        raise ValueError(f"TIFU scores for {0 if addend is None else len(addend)} instances, model scores for {len(scores)}")
    out = np.zeros(scores.shape, np.float64) if normalised is None else (1.0 - weight) * normalised
    return addend.add_to(out, 1.0)


@dataclass(frozen=True)
class FusionPoint:
    """One grid point: fusion weight λ, TIFU α, its validation criterion and the validation
    metrics it averages ({"recall@10": …}; None when a checkpoint does not hold them)."""

    weight: float
    alpha: float
    validation_criterion: float
    metrics: dict[str, float] | None = None
    #: Item-transition weight ν and how t is read ({"decay", "explore_only"}; None: ν = 0).
    transition: float = 0.0
    transition_option: dict[str, Any] | None = None


@dataclass
class ScoreFusion:
    """A chosen fusion: weight λ, TIFU α and the TIFU pool (None when λ = 0).

    ``grid`` holds every point's validation criterion; ``tifu_validation`` TIFU-KNN's own
    tuning objective (mean NDCG@10,20) for the record.
    """

    weight: float
    transform: Transform
    scorer: TifuScorer | None
    grid: list[FusionPoint] = field(default_factory=list)
    tifu_validation: float | None = None
    #: TIFU-KNN's parameters as tuned (or given), before the grid's choice of α.
    tuned_tifu: TifuParams | None = None
    #: How the grid's best point compared with the better part alone (``fusion_choice.select_point``).
    selection: dict[str, Any] | None = None
    #: The item-transition term ν · t (None / 0: none).
    transitions: TransitionScorer | None = None
    transition_weight: float = 0.0
    transition_option: TransitionOption | None = None

    @property
    def uses_transitions(self) -> bool:
        return self.transitions is not None and self.transition_weight > 0 and self.transition_option is not None

    @property
    def alpha(self) -> float | None:
        return None if self.scorer is None else self.scorer.params.alpha

    def prepare(self, data: BasketData, instances: Instances) -> SparseScores | None:
        """The neighbour search: the instances' addend λ · q (+ ν · t), the weighted kept TIFU
        (and item-transition) scores (None when λ = 0)."""
        if self.scorer is None or self.weight == 0:
            return None
        tifu = self.scorer.scores(data, instances)[self.scorer.params.alpha]
        if not self.uses_transitions:
            return tifu.scaled(self.weight)
        assert self.transitions is not None and self.transition_option is not None
        t = self.transitions.scores(data, instances, self.transition_option)
        return SparseScores.weighted_sum([(self.weight, tifu), (self.transition_weight, t)])

    def apply(
        self,
        scores: np.ndarray,
        data: BasketData,
        instances: Instances,
        prepared: SparseScores | None = None,
        chunk: int = DEFAULT_CHUNK,
    ) -> np.ndarray:
        """The fused ranking scores of ``instances`` from the model's ``scores``
        (``prepared``: this fusion's :meth:`prepare` of the same instances, if already made).

        Shapes: scores [n, I] -> [n, I] (float64 when fused, the model's own when λ = 0).
        """
        if self.weight == 0 or self.scorer is None:
            return scores
        addend = prepared if prepared is not None else self.prepare(data, instances)
        assert addend is not None
        out = np.empty(scores.shape, np.float64)
        for start in range(0, len(scores), chunk):
            stop = min(start + chunk, len(scores))
            out[start:stop] = fuse(scores[start:stop], None, self.weight, self.transform, addend=addend.rows(start, stop))
        return out

    def top_k_shared(
        self, scores: SharedScores, k: int, prepared: SparseScores | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top k of :meth:`apply` for model scores given as :class:`SharedScores`, from a few
        candidates per instance (``scoring.candidates``): the same items and values, ties
        included. Needs the "sigmoid" transform (minmax depends on each row's extremes).

        Shapes: scores of n rows, prepared (:meth:`prepare`) of n rows -> ([n, k], [n, k]).
        """
        if self.transform != "sigmoid":
            raise ValueError("top_k_shared needs the sigmoid transform")
        if self.weight == 0 or self.scorer is None:
            return fused_top_k(scores, k)
        return fused_top_k(scores, k, None, self.weight, addend=prepared)

    def summary(self) -> dict[str, Any]:
        """The choice as plain numbers (for logs, results and the CLI)."""
        best = max((g.validation_criterion for g in self.grid), default=None)
        p = self.scorer.params if self.scorer is not None else None
        alone = self.tuned_tifu.alpha if self.tuned_tifu is not None else None  # TIFU-KNN's own α
        return {
            "weight": self.weight,
            "tifu": None if p is None else asdict(p),
            "validation_criterion": best,
            "model_alone": next((g.validation_criterion for g in self.grid if g.weight == 0), None),
            "tifu_alone": next(
                (g.validation_criterion for g in self.grid if g.weight == 1 and g.alpha == alone), None
            ),
            "selection": self.selection,
            "transition": self.transition_weight if self.uses_transitions else 0.0,
            "transition_option": asdict(self.transition_option) if self.uses_transitions else None,  # type: ignore[arg-type]
        }

    def describe(self) -> str:
        """One line saying what validation chose, and why."""
        s = self.summary()
        why = (
            f"validation criterion: grid best {s['validation_criterion']:.4f}, model alone "
            f"{s['model_alone']:.4f}"
            + (f", TIFU-KNN alone {s['tifu_alone']:.4f}" if s["tifu_alone"] is not None else "")
            if s["validation_criterion"] is not None and s["model_alone"] is not None
            else "fixed"
        )
        sel = self.selection
        if sel is not None and sel.get("eligible") is not None:
            why += f"; {sel['eligible']} of {len(self.grid)} points at least TIFU-KNN's on every validation metric"
        if sel is not None and sel.get("criterion") == "at10":
            why += "; points ranked by the mean of recall, NDCG and PHR at 10 (fusion_criterion: at10)"
        if sel is not None and sel["rule"] in ("1se", "floor"):
            why += (
                f"; the best fused point beats the better part by {sel['gain_over_better_part']:.4f}"
                f" (1 standard error {sel['standard_error']:.4f})"
            )
        if self.weight == 0:
            return f"fusion with TIFU-KNN: off (the model alone; {why})"
        p = s["tifu"]
        extra = (
            f" + item transitions: weight {self.transition_weight} ({self.transition_option.name})"  # type: ignore[union-attr]
            if self.uses_transitions
            else ""
        )
        tifu = f"k={p['k']}, m={p['m']}, r_b={p['r_b']}, r_g={p['r_g']}, alpha={p['alpha']}"
        if not extra:  # without transitions the reason shares the parameters' parenthesis
            return f"fusion with TIFU-KNN: weight {self.weight} ({tifu}; {why})"
        return f"fusion with TIFU-KNN: weight {self.weight} ({tifu}){extra}; {why}"

    def state(self) -> dict[str, Any]:
        return {
            "kind": "tifu-fusion/1",
            "weight": self.weight,
            "transform": self.transform,
            "scorer": None if self.scorer is None else self.scorer.state(),
            "grid": [asdict(g) for g in self.grid],
            "tifu_validation": self.tifu_validation,
            "tuned_tifu": None if self.tuned_tifu is None else asdict(self.tuned_tifu),
            "selection": self.selection,
            "transitions": self.transitions.state() if self.uses_transitions else None,  # type: ignore[union-attr]
            "transition_weight": self.transition_weight if self.uses_transitions else 0.0,
            "transition_option": asdict(self.transition_option) if self.uses_transitions else None,  # type: ignore[arg-type]
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ScoreFusion:
        if state.get("kind") != "tifu-fusion/1":
            raise ValueError(f"not a fusion state (kind {state.get('kind')!r})")
        scorer = None if state["scorer"] is None else TifuScorer.from_state(state["scorer"])
        transitions = state.get("transitions")  # absent from a checkpoint without transitions
        option = state.get("transition_option")
        return cls(
            float(state["weight"]), state["transform"], scorer,
            [FusionPoint(**g) for g in state["grid"]], state["tifu_validation"],
            None if state.get("tuned_tifu") is None else TifuParams(**state["tuned_tifu"]),
            state.get("selection"),
            None if transitions is None else TransitionScorer.from_state(transitions),
            float(state.get("transition_weight", 0.0)),
            None if option is None else TransitionOption(**option),
        )
