"""Fusing any model's scores with TIFU-KNN's whole score, the weight chosen on validation.

For a customer u and item i, with s_{u,i} the trained model's score and t_{u,i} TIFU-KNN's score
(:mod:`basketgnn.scoring.tifu`: α · own decayed frequency + (1 − α) · neighbour mean), both are
put on a rank-compatible [0, 1] scale per customer,

    p_{u,i} = sigmoid(s_{u,i})                        (transform "sigmoid", for logits), or
    p_{u,i} = (s_{u,i} − min_j s_{u,j}) / (max_j s_{u,j} − min_j s_{u,j})   ("minmax", any score)
    q_{u,i} = t_{u,i} / max_j t_{u,j}                 (0 for a customer with no TIFU score)

and items are ranked by the convex combination

    f_{u,i} = (1 − λ) · p_{u,i} + λ · q_{u,i}   [+ ν · t_{u,i}].

λ = 0 is the model alone (its own scores are returned untouched) and λ = 1 is TIFU-KNN alone
(its ranking, tie for tie, over the kept entries). The optional third term (``transitions``;
issue 11) is the customer's item-transition score t in (0, 1]
(:mod:`basketgnn.scoring.transitions`: what the pool's customers buy in the basket after one
holding the customer's items), a personalised score for items the customer has not bought;
its weight ν and how t is read (history decay, new items only or not) are chosen with λ, for
λ > 0 at TIFU's tuned α. :func:`choose_fusion` tunes TIFU-KNN's hyperparameters on the
validation customers exactly as ``TifuKnn`` does (mean NDCG@10,20), then picks (λ, α) from a
grid that contains both ends, by the mean of recall, NDCG and PHR at 10 and 20 on the same
validation customers. Ties go to the smaller λ, then to TIFU's tuned α.
By default (rule "floor") only points that are at least as good as TIFU-KNN alone (λ = 1 at its
tuned α) on *each* of those six validation metrics are eligible: TIFU-KNN is what a retailer
already runs, so the default never trades one of its metrics for another. Among the eligible
points a fused one (0 < λ < 1, or TIFU at another α) is only taken when it beats the better
eligible part alone by more than one standard error of the paired per-customer difference (the
one-standard-error rule: prefer the simpler choice when the gain is within noise); otherwise
that part alone is used. So the fused model is at least as good on validation as TIFU-KNN on
every metric, and as the better of its two parts on the criterion. Rule "1se" drops the
per-metric floor (the choice before it), rule "best" takes the grid's argmax.

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
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.scoring.candidates import SharedScores, fused_top_k, sigmoid
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import (
    DEFAULT_POOL_CAP,
    NeighbourIndex,
    SparseRows,
    TifuParams,
    capped_pool,
    customer_vectors,
    pool_codes,
    pool_vectors,
    query_codes,
    tune_tifu,
)
from basketgnn.scoring.topk_kernel import fused_top_k_dense
from basketgnn.scoring.transitions import OPTIONS as TRANSITION_OPTIONS
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer

#: Fusion weights λ tried on validation; 0 (model alone) and 1 (TIFU-KNN alone) are the ends.
FUSION_WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: TIFU α values tried beside the tuned one (0: the neighbour mean alone).
FUSION_ALPHAS: tuple[float, ...] = (0.0, 0.2, 0.5, 0.8)
#: Item-transition weights ν tried beside 0 (with ``transitions``), for every λ > 0.
TRANSITION_WEIGHTS: tuple[float, ...] = (0.02, 0.05, 0.1)
#: The validation metrics whose mean at 10 and 20 picks (λ, α).
CRITERION: tuple[str, ...] = ("recall", "ndcg", "phr")
CRITERION_KS: tuple[int, ...] = (10, 20)
#: TIFU entries kept per customer.
DEFAULT_TOP = 200
_CHUNK = 2048  # rows fused at a time (memory: chunk x I float64)

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

    @classmethod
    def build(cls, data: BasketData, train: Instances, params: TifuParams, top: int = DEFAULT_TOP) -> TifuScorer:
        """The pool of ``train``'s customers (capped: ``params.pool_cap``), each over its history
        and target basket."""
        pool = capped_pool(train, params.pool_cap, params.pool_seed)
        vectors = pool_vectors(data, pool, params.m, params.r_b, params.r_g)
        return cls(vectors, data.user_ids[pool.users], params, top)

    def scores(
        self, data: BasketData, instances: Instances, alphas: Sequence[float] | None = None
    ) -> dict[float, SparseScores]:
        """Each instance's TIFU score from its history baskets, per α (default: the params'
        α): the ``top`` largest entries, divided by the instance's largest one (so in (0, 1]).

        Shapes: -> {α: SparseScores of len(instances) rows}.
        """
        if data.n_items != self.vectors.n_cols:
            raise ValueError(f"TIFU pool has {self.vectors.n_cols} items but the data {data.n_items}")
        alphas = tuple(alphas) if alphas is not None else (self.params.alpha,)
        p = self.params
        own = customer_vectors(data.histories(instances.users, instances.n_history), data.n_items, p.m, p.r_b, p.r_g)
        codes = query_codes(self._distinct_ids, data.user_ids[instances.users])
        # float64 values: dividing TifuKnn's float32 scores keeps distinct values distinct.
        return self._index.kept_scores(own, codes, p.k, alphas, min(self.top, data.n_items))

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
    return _fuse_normalised(scores, None if weight == 1 else normalise(scores, transform), addend, weight)


def _fuse_normalised(
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
    metrics it averages ({"recall@10": …}; None in checkpoints written before they were kept)."""

    weight: float
    alpha: float
    validation_criterion: float
    metrics: dict[str, float] | None = None
    #: Item-transition weight ν and how t was read ({"decay", "explore_only"}; None: ν = 0).
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
    #: How the grid's best point compared with the better part alone (see choose_fusion's rule).
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
        chunk: int = _CHUNK,
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
        if not extra:  # the line as it read before item transitions
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
        transitions = state.get("transitions")  # absent in checkpoints written before them
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


def validation_criterion(ranked: np.ndarray, data: BasketData, instances: Instances) -> float:
    """Mean of recall, NDCG and PHR at 10 and 20 (the cut-offs that fit the catalogue).

    Shapes: ranked [n, ≥ max cut-off] item indices, best first.
    """
    targets = data.targets(instances.users, instances.n_history)
    cuts = criterion_ks(data.n_items)
    m = ranking_metrics(ranked[:, : max(cuts)], targets.values, targets.offsets, data.n_items, ks=cuts)
    return float(np.mean([m[f"{name}@{k}"] for name in CRITERION for k in cuts]))


def criterion_ks(n_items: int) -> tuple[int, ...]:
    return tuple(k for k in CRITERION_KS if k <= n_items) or (n_items,)


def customer_criterion(ranked: np.ndarray, data: BasketData, instances: Instances) -> np.ndarray:
    """Each instance's own mean of recall, NDCG and PHR at the criterion cut-offs (as
    ``metrics.ranking_metrics`` defines them); their mean is :func:`validation_criterion`.

    Shapes: ranked [n, ≥ max cut-off] item indices, best first -> [n] float64.
    """
    return _criterion(customer_metrics(ranked, data, instances))


def customer_metrics(ranked: np.ndarray, data: BasketData, instances: Instances) -> dict[str, np.ndarray]:
    """Each instance's own recall, NDCG and PHR at the criterion cut-offs, as
    ``metrics.ranking_metrics`` defines them ({"recall@10": [n], "ndcg@10": [n], …}, cut-off
    by cut-off).

    Shapes: ranked [n, ≥ max cut-off] item indices, best first -> {name: [n] float64}.
    """
    n, n_items = len(instances), data.n_items
    cuts = criterion_ks(n_items)
    targets = data.targets(instances.users, instances.n_history)
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(targets.offsets))
    keys = np.unique(owner * n_items + targets.values.astype(np.int64))  # targets as sets
    sizes = np.bincount(keys // n_items, minlength=n)  # [n]
    ranked_keys = np.arange(n, dtype=np.int64)[:, None] * n_items + ranked[:, : max(cuts)]
    hits = np.isin(ranked_keys, keys)  # [n, K]
    gain = 1.0 / np.log2(np.arange(2, max(cuts) + 2))  # [K] DCG discount of each position
    ideal = np.cumsum(gain)  # [K] ideal DCG of j + 1 relevant items
    out: dict[str, np.ndarray] = {}
    for k in cuts:
        found = hits[:, :k]
        out[f"recall@{k}"] = found.sum(axis=1) / sizes
        out[f"ndcg@{k}"] = (found * gain[:k]).sum(axis=1) / ideal[np.minimum(sizes, k) - 1]
        out[f"phr@{k}"] = found.any(axis=1).astype(np.float64)
    return out


def choose_fusion(
    val_scores: np.ndarray,
    data: BasketData,
    train: Instances,
    validate: Instances,
    *,
    transform: Transform = "sigmoid",
    tifu: TifuParams | None = None,
    weights: Sequence[float] = FUSION_WEIGHTS,
    alphas: Sequence[float] = FUSION_ALPHAS,
    top: int = DEFAULT_TOP,
    tune_sample: int | None = 2000,
    seed: int = 0,
    chunk: int = _CHUNK,
    rule: Literal["floor", "1se", "best"] = "floor",
    pool_cap: int | None = DEFAULT_POOL_CAP,
    transitions: bool = False,
    transition_weights: Sequence[float] = TRANSITION_WEIGHTS,
    transition_options: Sequence[TransitionOption] = TRANSITION_OPTIONS,
) -> ScoreFusion:
    """Choose the fusion of a trained model with TIFU-KNN on the validation customers.

    Args:
        val_scores: the trained model's scores of ``validate``, [n_val, I].
        data, train, validate: the data, the training instances (TIFU's pool) and the
            validation instances (whose targets choose).
        transform: how the model's scores are put on [0, 1] ("sigmoid" for logits).
        tifu: TIFU-KNN's hyperparameters; None tunes them on ``validate`` as TifuKnn does.
        weights, alphas: the grid of λ and of α beside TIFU's own (module docstring).
        top: TIFU entries kept per customer.
        pool_cap: with ``tifu`` None, TIFU's neighbour pool cap while tuning and after
            (``TifuParams.pool_cap``); a given ``tifu`` brings its own.
        rule: "best": the grid point with the best criterion; "1se" (the one-standard-error
            rule): that point only when it beats the better part alone (λ = 0, or λ = 1 at
            TIFU's tuned α) by more than one standard error of the paired per-customer
            difference, else that part alone; "floor" (the default): "1se" among the points
            that are at least TIFU-KNN alone's on each validation metric (recall, NDCG and PHR
            at 10 and 20). Each rule's choice is at least as good on the criterion as each
            eligible part alone (see :func:`select_point`).
        transitions: also try the item-transition term ν · t (module docstring): every λ > 0
            at TIFU's tuned α with every ν of ``transition_weights`` and every way of reading t
            of ``transition_options``, beside the points without it. The transition matrix is
            built from the same (capped) pool as TIFU's.
    """
    if len(val_scores) != len(validate) or val_scores.shape[1] != data.n_items:
        raise ValueError(f"validation scores {val_scores.shape} for {len(validate)} instances and {data.n_items} items")
    tifu_validation = None
    if tifu is None:
        start = TifuParams(pool_cap=pool_cap)
        tifu, tifu_validation = tune_tifu(data, train, validate, start, sample=tune_sample, seed=seed)
    weights = sorted({float(w) for w in weights} | {0.0, 1.0})
    alpha_list = [float(tifu.alpha)] + sorted({float(a) for a in alphas} - {float(tifu.alpha)})
    scorer = TifuScorer.build(data, train, tifu, top)
    by_alpha = scorer.scores(data, validate, alpha_list)
    # Item transitions: extras[j] = (ν, option) for j >= 1; j = 0 is no transition term.
    extras: list[tuple[float, TransitionOption] | None] = [None]
    trans_scorer, by_option = None, {}
    if transitions:
        trans_scorer = TransitionScorer.build(data, capped_pool(train, tifu.pool_cap, tifu.pool_seed))
        by_option = {o: trans_scorer.scores(data, validate, o) for o in transition_options}
        extras += [(float(nu), o) for o in transition_options for nu in transition_weights if nu > 0]
    cut = max(criterion_ks(data.n_items))
    points = [(w, a, 0) for w in weights for a in alpha_list if w > 0 or a == alpha_list[0]]
    points += [(w, alpha_list[0], j) for w in weights if w > 0 for j in range(1, len(extras))]
    ranked = {key: np.empty((len(validate), cut), np.int64) for key in points}
    widest = max([int(np.diff(s.offsets).max(initial=0)) for s in by_alpha.values()]
                 + [int(np.diff(t.offsets).max(initial=0)) for t in by_option.values()])  # fmt: skip
    for start in range(0, len(validate), chunk):
        stop = min(start + chunk, len(validate))
        model = val_scores[start:stop]
        normalised = normalise(model, transform)  # once per chunk, not per grid point
        # Each row's items by normalised score (desc, item asc), as far as the fused top-k of
        # any grid point can need them (its addend items, then `cut` more and their ties).
        prefix = top_k(normalised, min(data.n_items, cut + 2 * widest + 64))
        q = by_alpha[alpha_list[0]].rows(start, stop)
        t_rows = {o: t.rows(start, stop) for o, t in by_option.items()}
        for w, a, j in points:  # the model alone (w = 0) does not depend on α: one point
            if w == 0:
                fused = model
            else:
                extra = extras[j]
                if extra is None:
                    addend = by_alpha[a].rows(start, stop).scaled(w)
                else:  # λ q + ν t as ScoreFusion.prepare makes it
                    addend = SparseScores.weighted_sum([(w, q), (extra[0], t_rows[extra[1]])])
                ranked[w, a, j][start:stop] = _ranked_fused(model, normalised, prefix, addend, w, cut)
                continue
            ranked[w, a, j][start:stop] = top_k(fused, cut)
    per_metric = {key: customer_metrics(ranked[key], data, validate) for key in points}  # {name: [n_val]} each
    best_key, why = select_point(per_metric, points, alpha_list, rule)

    def point(key: tuple[float, float, int]) -> FusionPoint:
        extra = extras[key[2]]
        return FusionPoint(
            key[0], key[1], round(float(_criterion(per_metric[key]).mean()), 6),
            {name: round(float(v.mean()), 6) for name, v in per_metric[key].items()},
            0.0 if extra is None else extra[0], None if extra is None else asdict(extra[1]),
        )

    grid = [point(key) for key in points]
    best_w, best_a, best_j = best_key
    if best_w == 0:
        return ScoreFusion(0.0, transform, None, grid, tifu_validation, tifu, why)
    chosen = replace(tifu, alpha=best_a)
    scorer = TifuScorer(scorer.vectors, scorer.customer_ids, chosen, top)
    extra = extras[best_j]
    return ScoreFusion(
        best_w, transform, scorer, grid, tifu_validation, tifu, why,
        None if extra is None else trans_scorer, 0.0 if extra is None else extra[0],
        None if extra is None else extra[1],
    )


def _ranked_fused(
    model: np.ndarray, normalised: np.ndarray, prefix: np.ndarray, addend: SparseScores, weight: float, k: int
) -> np.ndarray:
    """``top_k(_fuse_normalised(model, normalised, addend, weight), k)`` for 0 < weight, from
    each row's addend items and the start of its ``prefix`` (its items by normalised score,
    desc, item asc: ``topk_kernel.fused_top_k_dense``); rows whose prefix is too short take the
    dense path. Shapes: model, normalised [c, I]; prefix [c, W] -> [c, k] int64."""
    items, dense = fused_top_k_dense(
        normalised, prefix, addend.offsets, np.asarray(addend.items, np.int64),
        np.asarray(addend.values, np.float64), float(weight), int(k), weight == 1,
    )  # fmt: skip
    rows = np.flatnonzero(dense)
    if len(rows):
        sub = SparseScores.concat([addend.rows(int(r), int(r) + 1) for r in rows])
        fused = _fuse_normalised(model[rows], None if weight == 1 else normalised[rows], sub, weight)
        items[rows] = top_k(fused, k)
    return items


def _criterion(per_metric: dict[str, np.ndarray]) -> np.ndarray:
    """Each customer's criterion from its metrics, summed in :func:`customer_metrics`' order
    (bit for bit :func:`customer_criterion`). Shapes: {name: [n]} -> [n]."""
    total = np.zeros(len(next(iter(per_metric.values()))))
    for value in per_metric.values():
        total += value
    return total / len(per_metric)


def select_point(
    per_metric: dict[tuple, dict[str, np.ndarray]],
    points: Sequence[tuple],
    alphas: Sequence[float],
    rule: str = "floor",
) -> tuple[tuple, dict[str, Any]]:
    """The grid point a rule keeps, and why (choose_fusion's last step, apart for tests).

    ``points`` are (λ, α) pairs, or (λ, α, j) triples with j > 0 an extra term (item
    transitions) and j = 0 none, with (0, alphas[0]) the model alone and (1, alphas[0]) TIFU-KNN
    alone at its tuned α (j = 0); ``per_metric[point]`` each validation customer's metrics there.
    Ties go to the smaller λ, then to the earlier α, then to no extra term. "best": the best
    criterion. "1se": that point only when it beats the better part alone by more than one standard error of the
    paired per-customer difference of the criterion, else that part. "floor": "1se" among the
    points whose mean of every metric is at least TIFU-KNN alone's (TIFU-KNN always is).

    Shapes: per_metric {point: {name: [n_val]}} -> (the chosen point, as given, record).
    """
    if rule not in ("floor", "1se", "best"):
        raise ValueError(f"unknown rule {rule!r}; use 'floor', '1se' or 'best'")
    criterion = {key: _criterion(per_metric[key]) for key in points}  # [n_val] each
    means = {key: {name: float(v.mean()) for name, v in per_metric[key].items()} for key in points}

    def extra(key: tuple) -> int:
        return int(key[2]) if len(key) > 2 else 0

    tifu_alone = next(key for key in points if key[0] == 1 and key[1] == alphas[0] and extra(key) == 0)

    def order(key: tuple) -> tuple[float, float, int, int]:
        return round(float(criterion[key].mean()), 6), -key[0], -list(alphas).index(key[1]), -extra(key)

    eligible = list(points)
    if rule == "floor":
        floor = means[tifu_alone]
        eligible = [key for key in points if all(means[key][name] >= floor[name] for name in floor)]
    best = max(eligible, key=order)
    part = max((key for key in eligible if key[0] == 0 or key == tifu_alone), key=order)
    diff = criterion[best] - criterion[part]  # [n_val]
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    gain = float(diff.mean())
    if rule != "best" and best != part and gain <= se:
        best = part
    why: dict[str, Any] = {"rule": rule, "gain_over_better_part": round(gain, 6), "standard_error": round(se, 6)}
    if rule == "floor":
        why["eligible"] = len(eligible)
    return best, why


def fusion_choice(fusion: ScoreFusion) -> dict[str, Any]:
    """The choice as a plain record, in the shape of the neighbour choice it replaces
    (``weight``, ``k`` (None when off), ``grid``) plus the TIFU parameters, the validation
    criterion of the winner and of each part alone, and a one-line ``description``."""
    summary = fusion.summary()
    return {
        "kind": "tifu-fusion",
        "weight": fusion.weight,
        "k": None if summary["tifu"] is None else summary["tifu"]["k"],
        **summary,
        "description": fusion.describe(),
        "grid": [asdict(g) for g in fusion.grid],
    }
