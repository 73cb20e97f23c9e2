"""Ranking add-ons: the engine step after training that may change how a trained model ranks.

After the best weights are restored, :func:`choose_addon` looks at the model's validation
scores, the data and the train / validate instances, and picks an add-on (or none). The
add-on's state goes into the checkpoint ("addon"), the choice into its extras, and
:class:`basketgnn.engine.recommender.NeuralRecommender` applies the add-on when scoring. The
step knows nothing about the model: it sees scores [n, I] only, so it works for every model
(all configs carry the add-on's options).

Two add-ons, chosen by the config's ``fusion`` option (an engine option: every model has it,
:class:`basketgnn.engine.options.TrainOptions`):

* ``tifu`` (the default): :class:`FusionAddOn`, the model's scores fused with TIFU-KNN's whole
  score, (1 − λ) · sigmoid(score) + λ · TIFU / max [+ ν · item transitions with
  ``transitions``], TIFU tuned and λ (and ν) chosen on the validation customers, λ from 0
  (model alone) to 1 (TIFU-KNN alone, plus the transitions when ν > 0)
  (:mod:`basketgnn.scoring.fusion`, :mod:`basketgnn.scoring.transitions`).
* ``neighbours``: :class:`NeighbourAddOn`, the older neighbour score of
  :mod:`basketgnn.models.neighbours` (what a customer's nearest training customers buy, fused as
  sigmoid(score) + w · n), its weight w and neighbour count k chosen on validation
  (``neighbour_weight``, ``neighbour_k``, ``neighbour_top``).
* ``off``: no add-on step.

An add-on has ``search(data, instances)`` (the neighbour search: numpy / sparse products that
release the GIL, so the recommender runs it in a thread beside the model's scoring),
``fuse(logits, found)``, ``needs_model`` (False when the model's scores do not matter: TIFU-KNN
alone) and ``state()`` for the checkpoint; :func:`addon_from_state` reads either back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.evaluate import usable_ks
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.models.neighbours import NeighbourPool, NeighbourScores, fuse_neighbours
from basketgnn.scoring.fusion import ScoreFusion, choose_fusion, fusion_choice
from basketgnn.scoring.tifu import DEFAULT_POOL_CAP

#: Config options that only act after training (a resumed training ignores changes to them).
ADDON_OPTIONS: tuple[str, ...] = ("fusion", "transitions", "neighbour_weight", "neighbour_k", "neighbour_top")
#: Weights and neighbour counts tried when the config asks for "auto".
NEIGHBOUR_WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
NEIGHBOUR_KS: tuple[int, ...] = (100, 300)
_FUSE_CHUNK = 2048  # validation rows fused at a time (memory: chunk x I float64)
#: The validation metrics whose mean picks the weight (at the usable cut-offs among 10, 20).
NEIGHBOUR_CRITERION: tuple[str, ...] = ("recall", "ndcg", "phr")


@dataclass(frozen=True)
class AddOnChoice:
    """What validation chose: ``weight`` 0 means no add-on (then ``k`` is None); ``grid`` holds
    every tried point with its validation criterion. ``kind`` is "neighbours" or
    "tifu-fusion"; a fusion choice keeps the rest of ``scoring.fusion.fusion_choice`` (TIFU
    parameters, each part's criterion, the selection rule, a description) in ``details``."""

    kind: str
    weight: float
    k: int | None
    grid: list[dict[str, float]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {**d.pop("details"), **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AddOnChoice:
        core = ("kind", "weight", "k", "grid")
        return cls(
            d.get("kind", "neighbours"), float(d["weight"]), d.get("k"), list(d.get("grid", [])),
            {key: v for key, v in d.items() if key not in core},
        )

    def describe(self) -> str:
        if self.kind == "tifu-fusion":
            return str(self.details["description"])
        if self.weight > 0:
            return f"neighbour scores: weight {self.weight} with {self.k} neighbours"
        return "neighbour scores: off (weight 0 ranked best on the validation customers)"


class RankingAddOn(Protocol):
    """What the recommender and the checkpoint need of an add-on (module docstring)."""

    kind: str
    weight: float

    @property
    def needs_model(self) -> bool: ...

    def search(self, data: BasketData, instances: Instances) -> Any: ...

    def fuse(self, logits: np.ndarray, found: Any) -> np.ndarray: ...

    def state(self) -> dict[str, Any]: ...


class NeighbourAddOn:
    """Ranks by sigmoid(score) + weight · n (``models.neighbours.fuse_neighbours``).

    ``search`` (the neighbour search, numpy / sparse products that release the GIL) is separate
    from ``fuse`` so the recommender can run it beside the model's scoring.
    """

    kind = "neighbours"
    needs_model = True

    def __init__(self, pool: NeighbourPool, weight: float) -> None:
        self.pool = pool
        self.weight = float(weight)

    def search(self, data: BasketData, instances: Instances) -> NeighbourScores:
        return self.pool.scores(data, instances)

    def fuse(self, logits: np.ndarray, found: NeighbourScores) -> np.ndarray:
        """Shapes: logits [n, I] -> [n, I] float64."""
        return fuse_neighbours(logits, found, self.weight)

    def state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.pool.state(), "weight": self.weight}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NeighbourAddOn:
        return cls(NeighbourPool.from_state(state), float(state["weight"]))


class FusionAddOn:
    """Ranks by (1 − λ) · sigmoid(score) + λ · TIFU / max [+ ν · t] (``scoring.fusion.ScoreFusion``
    with λ > 0); λ = 1 is TIFU-KNN alone (plus ν · t), which does not need the model's scores."""

    kind = "tifu-fusion"

    def __init__(self, fusion: ScoreFusion) -> None:
        if fusion.weight <= 0 or fusion.scorer is None:
            raise ValueError("a fusion add-on needs a weight above 0 and its TIFU pool")
        self.fusion = fusion

    @property
    def weight(self) -> float:
        return self.fusion.weight

    @property
    def needs_model(self) -> bool:
        return self.fusion.weight < 1

    def search(self, data: BasketData, instances: Instances) -> Any:
        return self.fusion.prepare(data, instances)

    def fuse(self, logits: np.ndarray, found: Any) -> np.ndarray:
        """Shapes: logits [n, I] -> [n, I] float64 (``found``: :meth:`search` of the same n)."""
        return self.fusion.apply(logits, None, None, found)  # type: ignore[arg-type]

    def state(self) -> dict[str, Any]:
        return self.fusion.state()


def addon_from_state(state: dict[str, Any] | None) -> RankingAddOn | None:
    """The add-on a checkpoint stored (None: the model ranks by its own scores). States without
    a kind are the neighbour add-on's (written before the fusion existed)."""
    if state is None:
        return None
    kind = state.get("kind", "neighbours")
    if kind == "neighbours":
        return NeighbourAddOn.from_state(state)
    if kind == "tifu-fusion/1":
        fusion = ScoreFusion.from_state(state)
        return FusionAddOn(fusion) if fusion.weight > 0 else None
    raise ValueError(f"unknown ranking add-on {kind!r}")


def wants_addon(config: Any) -> bool:
    """Whether the config asks for the add-on step (``fusion`` not off; with ``neighbours``,
    a neighbour weight other than 0)."""
    fusion = getattr(config, "fusion", "off")
    return fusion == "tifu" or (fusion == "neighbours" and getattr(config, "neighbour_weight", 0) != 0)


def choose_addon(
    config: Any,
    val_scores: np.ndarray,
    data: BasketData,
    train: Instances,
    validate: Instances,
) -> tuple[RankingAddOn | None, AddOnChoice | None]:
    """Choose the add-on the config asks for on the validation customers.

    ``fusion: tifu``: ``scoring.fusion.choose_fusion`` (TIFU tuned, then λ and α on a grid
    among the points at least TIFU-KNN's on every validation metric, with the one-standard-error
    rule), chunk by chunk. ``fusion: neighbours``:

    Every (k, weight) of the grid re-ranks the trained model's validation scores
    ``val_scores`` [n_val, I]; the winner has the best mean of recall, NDCG and PHR at 10 and
    20 (ties: the smaller weight, then the smaller k). Returns (the add-on, or None when the
    winning weight is 0; the choice with every grid point's criterion), or (None, None) when
    the config switches the step off.
    """
    if not wants_addon(config):
        return None, None
    if config.fusion == "tifu":
        cap = getattr(config, "neighbour_pool_cap", DEFAULT_POOL_CAP)
        fusion = choose_fusion(
            val_scores, data, train, validate, chunk=_FUSE_CHUNK, pool_cap=cap,
            transitions=bool(getattr(config, "transitions", False)),
        )
        d = fusion_choice(fusion)
        choice = AddOnChoice.from_dict(d)
        return (FusionAddOn(fusion) if fusion.weight > 0 else None), choice
    weights = NEIGHBOUR_WEIGHTS if config.neighbour_weight == "auto" else (float(config.neighbour_weight),)
    ks_nbr = NEIGHBOUR_KS if config.neighbour_k == "auto" else (int(config.neighbour_k),)
    targets = data.targets(validate.users, validate.n_history)
    cuts = usable_ks((10, 20), data.n_items)

    def criterion(neighbours: NeighbourScores, w: float) -> float:
        # Fused scores are made chunk by chunk: [chunk, I] float64, never [n_val, I].
        ranked = np.empty((len(val_scores), max(cuts)), dtype=np.int64)
        for start in range(0, len(val_scores), _FUSE_CHUNK):
            stop = min(start + _FUSE_CHUNK, len(val_scores))
            scores = val_scores[start:stop]
            if w > 0:
                scores = fuse_neighbours(scores, neighbours.rows(start, stop), w)
            ranked[start:stop] = top_k(scores, max(cuts))
        m = ranking_metrics(ranked, targets.values, targets.offsets, data.n_items, ks=cuts)
        return float(np.mean([m[f"{name}@{k}"] for name in NEIGHBOUR_CRITERION for k in cuts]))

    pool = NeighbourPool.build(data, train, k=max(ks_nbr), top=config.neighbour_top)
    by_k = pool.scores_by_k(data, validate, ks_nbr)  # one search for every k
    grid = [
        {"k": k, "weight": w, "validation_criterion": round(criterion(by_k[k], w), 6)}
        for k in ks_nbr
        for w in weights
    ]
    best = max(grid, key=lambda g: (g["validation_criterion"], -g["weight"], -g["k"]))
    # With weight 0 the neighbours are not used, so no k was chosen.
    choice = AddOnChoice(
        "neighbours", best["weight"], int(best["k"]) if best["weight"] > 0 else None, grid
    )
    addon = NeighbourAddOn(pool.with_k(best["k"]), best["weight"]) if best["weight"] > 0 else None
    return addon, choice
