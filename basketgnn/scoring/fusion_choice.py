"""The fusion of a trained model with TIFU-KNN, chosen on the validation customers
(:func:`choose_fusion`), and the validation criterion that chooses it.

:func:`choose_fusion` tunes TIFU-KNN's hyperparameters on the validation customers exactly as
``TifuKnn`` does (mean NDCG@10,20), then picks (λ, α) (and, with item transitions, ν and how t
is read) from a grid that contains both ends (λ = 0: the model alone; λ = 1: TIFU-KNN alone),
by the mean of recall, NDCG and PHR at 10 and 20 on the same validation customers
(:func:`validation_criterion`; with ``criterion="at10"`` the mean of the three at 10 alone, for a
user who shows ten items and cares about them first). Ties go to the smaller λ, then to TIFU's tuned α. The fused
score f of each grid point is :mod:`basketgnn.scoring.fusion`'s.

By default (rule "floor") only points that are at least as good as TIFU-KNN alone (λ = 1 at its
tuned α) on *each* of those six validation metrics are eligible: TIFU-KNN is what a retailer
already runs, so the default never trades one of its metrics for another. Among the eligible
points a fused one (0 < λ < 1, or TIFU at another α) is only taken when it beats the better
eligible part alone by more than one standard error of the paired per-customer difference (the
one-standard-error rule: prefer the simpler choice when the gain is within noise); otherwise
that part alone is used. So the fused model is at least as good on validation as TIFU-KNN on
every metric, and as the better of its two parts on the criterion. Rule "1se" has no
per-metric floor, rule "best" takes the grid's argmax (:func:`select_point`).

Each grid point's validation ranking comes from the addend's items and the start of each
row's items by normalised model score (:func:`~basketgnn.scoring.topk_kernel.fused_top_k_dense`),
not from dense fused rows; the rows it cannot settle take the dense path.

Shapes in this module: n instances (n_val validation customers, c in a chunk), I items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.scoring.fusion import (
    DEFAULT_CHUNK,
    DEFAULT_TOP,
    FusionPoint,
    ScoreFusion,
    TifuScorer,
    Transform,
    fuse_normalised,
    normalise,
)
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import DEFAULT_POOL_CAP, TifuParams, capped_pool, tune_tifu
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
#: What the rules maximise: "mean" (recall, NDCG and PHR at 10 and 20) or "at10" (the three at
#: the first cut-off alone). Either way the floor rule's eligibility reads all six metrics.
Criterion = Literal["mean", "at10"]

#: A grid point: (λ, α, j), j > 0 the extra term ``_Grid.extras[j]``, j = 0 none.
GridKey = tuple[float, float, int]


def validation_criterion(ranked: np.ndarray, data: BasketData, instances: Instances) -> float:
    """Mean of recall, NDCG and PHR at 10 and 20 (the cut-offs that fit the catalogue).

    Shapes: ranked [n, ≥ max cut-off] item indices, best first.
    """
    targets = data.targets(instances.users, instances.n_history)
    cuts = criterion_ks(data.n_items)
    m = ranking_metrics(ranked[:, : max(cuts)], targets.values, targets.offsets, data.n_items, ks=cuts)
    return float(np.mean([m[f"{name}@{k}"] for name in CRITERION for k in cuts]))


def criterion_ks(n_items: int) -> tuple[int, ...]:
    """The criterion's cut-offs that fit a catalogue of ``n_items`` (else the catalogue size)."""
    return tuple(k for k in CRITERION_KS if k <= n_items) or (n_items,)


def customer_criterion(
    ranked: np.ndarray, data: BasketData, instances: Instances, criterion: Criterion = "mean"
) -> np.ndarray:
    """Each instance's own mean of recall, NDCG and PHR at the criterion cut-offs (as
    ``metrics.ranking_metrics`` defines them; ``at10``: at the first cut-off only); their mean
    is :func:`validation_criterion`.

    Shapes: ranked [n, ≥ max cut-off] item indices, best first -> [n] float64.
    """
    metrics = customer_metrics(ranked, data, instances)
    return _criterion({name: metrics[name] for name in criterion_names(list(metrics), criterion)})


def criterion_names(names: list[str], criterion: Criterion) -> list[str]:
    """The metrics a criterion averages: every one ("mean"), or those at the first cut-off
    ("at10": "recall@10", "ndcg@10", "phr@10")."""
    if criterion not in ("mean", "at10"):
        raise ValueError(f"unknown criterion {criterion!r}; use 'mean' or 'at10'")
    if criterion == "mean":
        return names
    first = names[0].split("@")[1]
    return [name for name in names if name.split("@")[1] == first]


def paired_gain(better: np.ndarray, base: np.ndarray) -> tuple[float, float]:
    """The mean per-customer difference better − base and its standard error (0 for one
    customer): the one-standard-error rule keeps ``better`` when the gain exceeds it.
    Shapes: [n], [n] -> (gain, se)."""
    diff = better - base
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    return float(diff.mean()), se


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


@dataclass(frozen=True)
class _Grid:
    """The validation grid and the scores its points fuse.

    ``alphas``: TIFU's tuned α first, then the others ascending; ``by_alpha[α]``: the
    validation customers' kept TIFU scores; ``extras[j]`` for j ≥ 1: an item-transition term
    (ν, option) (``extras[0]`` is None: no term), ``by_option[option]``: the validation
    customers' transition scores; ``points``: every (λ, α, j) tried.
    """

    scorer: TifuScorer
    alphas: list[float]
    by_alpha: dict[float, SparseScores]
    transitions: TransitionScorer | None
    by_option: dict[TransitionOption, SparseScores]
    extras: list[tuple[float, TransitionOption] | None]
    points: list[GridKey]

    def widest_row(self) -> int:
        """The most entries a validation customer keeps in any part's scores."""
        return max([int(np.diff(s.offsets).max(initial=0)) for s in self.by_alpha.values()]
                   + [int(np.diff(t.offsets).max(initial=0)) for t in self.by_option.values()])  # fmt: skip


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
    chunk: int = DEFAULT_CHUNK,
    rule: Literal["floor", "1se", "best"] = "floor",
    pool_cap: int | None = DEFAULT_POOL_CAP,
    transitions: bool = False,
    transition_weights: Sequence[float] = TRANSITION_WEIGHTS,
    transition_options: Sequence[TransitionOption] = TRANSITION_OPTIONS,
    criterion: Criterion = "mean",
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
        criterion: what the rule maximises ("mean": the six metrics; "at10": recall, NDCG and
            PHR at 10), see :func:`select_point`.
    """
    if len(val_scores) != len(validate) or val_scores.shape[1] != data.n_items:
        raise ValueError(f"validation scores {val_scores.shape} for {len(validate)} instances and {data.n_items} items")
    tifu_validation = None
    if tifu is None:
        start = TifuParams(pool_cap=pool_cap)
        tifu, tifu_validation = tune_tifu(data, train, validate, start, sample=tune_sample, seed=seed)
    grid, per_metric = grid_metrics(
        val_scores, data, train, validate, tifu, transform=transform, weights=weights, alphas=alphas, top=top,
        chunk=chunk, transitions=transitions, transition_weights=transition_weights,
        transition_options=transition_options,
    )  # fmt: skip
    best_key, why = select_point(per_metric, grid.points, grid.alphas, rule, criterion)
    records = [_grid_point(key, per_metric[key], grid.extras[key[2]]) for key in grid.points]
    best_w, best_a, best_j = best_key
    if best_w == 0:
        return ScoreFusion(0.0, transform, None, records, tifu_validation, tifu, why)
    scorer = TifuScorer(grid.scorer.vectors, grid.scorer.customer_ids, replace(tifu, alpha=best_a), top)
    extra = grid.extras[best_j]
    return ScoreFusion(
        best_w, transform, scorer, records, tifu_validation, tifu, why,
        None if extra is None else grid.transitions, 0.0 if extra is None else extra[0],
        None if extra is None else extra[1],
    )  # fmt: skip


def grid_metrics(
    scores: np.ndarray,
    data: BasketData,
    train: Instances,
    instances: Instances,
    tifu: TifuParams,
    *,
    transform: Transform = "sigmoid",
    weights: Sequence[float] = FUSION_WEIGHTS,
    alphas: Sequence[float] = FUSION_ALPHAS,
    top: int = DEFAULT_TOP,
    chunk: int = DEFAULT_CHUNK,
    transitions: bool = False,
    transition_weights: Sequence[float] = TRANSITION_WEIGHTS,
    transition_options: Sequence[TransitionOption] = TRANSITION_OPTIONS,
) -> tuple[_Grid, dict[GridKey, dict[str, np.ndarray]]]:
    """Every grid point's ranking of ``instances`` and each instance's metrics there (the
    criterion's recall, NDCG and PHR), for :func:`choose_fusion` on the validation customers, or
    to read what each point would give other customers. TIFU's pool and the transitions come
    from ``train``. Options as :func:`choose_fusion`'s.

    Shapes: scores [n, I] the model's -> (the grid, {point: {name: [n]}})."""
    grid = _score_grid(
        data, train, instances, tifu, weights, alphas, top,
        transitions, transition_weights, transition_options,
    )  # fmt: skip
    ranked = _rank_grid(scores, data, grid, transform, chunk)
    return grid, {key: customer_metrics(ranked[key], data, instances) for key in grid.points}


def _score_grid(
    data: BasketData,
    train: Instances,
    validate: Instances,
    tifu: TifuParams,
    weights: Sequence[float],
    alphas: Sequence[float],
    top: int,
    transitions: bool,
    transition_weights: Sequence[float],
    transition_options: Sequence[TransitionOption],
) -> _Grid:
    """The grid's points (λ of ``weights`` with 0 and 1 added; α of ``alphas`` beside TIFU's
    tuned one for λ > 0; with ``transitions`` each ν > 0 of ``transition_weights`` and each
    option at the tuned α for λ > 0) and the validation customers' scores they fuse: TIFU's
    kept scores from ``train``'s capped pool and, with transitions, the item-transition scores
    from the same pool."""
    weights = sorted({float(w) for w in weights} | {0.0, 1.0})
    alpha_list = [float(tifu.alpha)] + sorted({float(a) for a in alphas} - {float(tifu.alpha)})
    scorer = TifuScorer.build(data, train, tifu, top)
    by_alpha = scorer.scores(data, validate, alpha_list, exact_sums=True)
    extras: list[tuple[float, TransitionOption] | None] = [None]
    trans_scorer, by_option = None, {}
    if transitions:
        trans_scorer = TransitionScorer.build(data, capped_pool(train, tifu.pool_cap, tifu.pool_seed))
        by_option = {o: trans_scorer.scores(data, validate, o) for o in transition_options}
        extras += [(float(nu), o) for o in transition_options for nu in transition_weights if nu > 0]
    points = [(w, a, 0) for w in weights for a in alpha_list if w > 0 or a == alpha_list[0]]
    points += [(w, alpha_list[0], j) for w in weights if w > 0 for j in range(1, len(extras))]
    return _Grid(scorer, alpha_list, by_alpha, trans_scorer, by_option, extras, points)


def _rank_grid(
    val_scores: np.ndarray, data: BasketData, grid: _Grid, transform: Transform, chunk: int
) -> dict[GridKey, np.ndarray]:
    """Each grid point's ranking of the validation customers, ``chunk`` rows at a time.

    Shapes: val_scores [n_val, I] -> {point: [n_val, cut] int64}, cut the largest criterion
    cut-off."""
    cut = max(criterion_ks(data.n_items))
    n = len(val_scores)
    ranked = {key: np.empty((n, cut), np.int64) for key in grid.points}
    widest = grid.widest_row()
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        model = val_scores[start:stop]
        normalised = normalise(model, transform)  # once per chunk, not per grid point
        # Each row's items by normalised score (desc, item asc), as far as the fused top-k of
        # any grid point can need them (its addend items, then `cut` more and their ties).
        prefix = top_k(normalised, min(data.n_items, cut + 2 * widest + 64))
        q = grid.by_alpha[grid.alphas[0]].rows(start, stop)
        t_rows = {o: t.rows(start, stop) for o, t in grid.by_option.items()}
        for w, a, j in grid.points:  # the model alone (w = 0) does not depend on α: one point
            if w == 0:
                ranked[w, a, j][start:stop] = top_k(model, cut)
                continue
            extra = grid.extras[j]
            if extra is None:
                addend = grid.by_alpha[a].rows(start, stop).scaled(w)
            else:  # λ q + ν t as ScoreFusion.prepare makes it
                addend = SparseScores.weighted_sum([(w, q), (extra[0], t_rows[extra[1]])])
            ranked[w, a, j][start:stop] = _ranked_fused(model, normalised, prefix, addend, w, cut)
    return ranked


def _grid_point(
    key: GridKey, metrics: dict[str, np.ndarray], extra: tuple[float, TransitionOption] | None
) -> FusionPoint:
    """The record of one grid point: its criterion and mean metrics on validation, rounded.
    Shapes: metrics {name: [n_val]}."""
    return FusionPoint(
        key[0], key[1], round(float(_criterion(metrics).mean()), 6),
        {name: round(float(v.mean()), 6) for name, v in metrics.items()},
        0.0 if extra is None else extra[0], None if extra is None else asdict(extra[1]),
    )  # fmt: skip


def _ranked_fused(
    model: np.ndarray, normalised: np.ndarray, prefix: np.ndarray, addend: SparseScores, weight: float, k: int
) -> np.ndarray:
    """``top_k(fuse_normalised(model, normalised, addend, weight), k)`` for 0 < weight, from
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
        fused = fuse_normalised(model[rows], None if weight == 1 else normalised[rows], sub, weight)
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
    criterion: Criterion = "mean",
) -> tuple[tuple, dict[str, Any]]:
    """The grid point a rule keeps, and why (:func:`choose_fusion`'s last step).

    ``points`` are (λ, α) pairs, or (λ, α, j) triples with j > 0 an extra term (item
    transitions) and j = 0 none, with (0, alphas[0]) the model alone and (1, alphas[0]) TIFU-KNN
    alone at its tuned α (j = 0); ``per_metric[point]`` each validation customer's metrics there.
    Ties go to the smaller λ, then to the earlier α, then to no extra term. "best": the best
    criterion. "1se": that point only when it beats the better part alone by more than one
    standard error of the paired per-customer difference of the criterion, else that part.
    "floor": "1se" among the points whose mean of every metric is at least TIFU-KNN alone's
    (TIFU-KNN always is). The criterion is each customer's mean of every metric ("mean"), or of
    the metrics at the first cut-off ("at10"); the floor reads every metric either way.

    Shapes: per_metric {point: {name: [n_val]}} -> (the chosen point, as given, record).
    """
    if rule not in ("floor", "1se", "best"):
        raise ValueError(f"unknown rule {rule!r}; use 'floor', '1se' or 'best'")
    names = criterion_names(list(per_metric[points[0]]), criterion)
    score = {key: _criterion({name: per_metric[key][name] for name in names}) for key in points}  # [n_val] each
    means = {key: {name: float(v.mean()) for name, v in per_metric[key].items()} for key in points}

    def extra(key: tuple) -> int:
        return int(key[2]) if len(key) > 2 else 0

    tifu_alone = next(key for key in points if key[0] == 1 and key[1] == alphas[0] and extra(key) == 0)

    def order(key: tuple) -> tuple[float, float, int, int]:
        return round(float(score[key].mean()), 6), -key[0], -list(alphas).index(key[1]), -extra(key)

    eligible = list(points)
    if rule == "floor":
        floor = means[tifu_alone]
        eligible = [key for key in points if all(means[key][name] >= floor[name] for name in floor)]
    best = max(eligible, key=order)
    part = max((key for key in eligible if key[0] == 0 or key == tifu_alone), key=order)
    gain, se = paired_gain(score[best], score[part])  # over [n_val]
    if rule != "best" and best != part and gain <= se:
        best = part
    why: dict[str, Any] = {"rule": rule, "gain_over_better_part": round(gain, 6), "standard_error": round(se, 6)}
    if criterion != "mean":
        why["criterion"] = criterion
    if rule == "floor":
        why["eligible"] = len(eligible)
    return best, why


def fusion_choice(fusion: ScoreFusion) -> dict[str, Any]:
    """The choice as a plain record: ``weight``, ``k`` (None when off), ``grid``, plus the TIFU parameters, the validation criterion of the
    winner and of each part alone, and a one-line ``description``."""
    summary = fusion.summary()
    return {
        "kind": "tifu-fusion",
        "weight": fusion.weight,
        "k": None if summary["tifu"] is None else summary["tifu"]["k"],
        **summary,
        "tuned_tifu": None if fusion.tuned_tifu is None else asdict(fusion.tuned_tifu),
        "description": fusion.describe(),
        "grid": [asdict(g) for g in fusion.grid],
    }
