"""A trained model fused with TIFU-KNN and item transitions: the ranking chosen after training,
wrapped around the model's own recommender.

:class:`FusedRecommender` ranks customer u's item i by

    (1 − λ) · sigmoid(s_{u,i}) + λ · TIFU_{u,i} / max_u TIFU  [+ ν · t_{u,i}]

where s is the wrapped recommender's score, TIFU-KNN's score is tuned and λ (and ν, the
item-transition weight) are chosen on the validation customers (:func:`choose`,
:mod:`basketgnn.scoring.fusion`, :mod:`basketgnn.scoring.transitions`). λ = 1 is TIFU-KNN alone
(plus ν · t), which does not run the wrapped model; λ = 0 is the model alone, and :func:`choose`
then returns no wrapper.

When the wrapped recommender gives its scores in shared form (``shared_scores``: DNNTSP's
default configuration), ``rank`` reads a few candidates per customer
(:func:`basketgnn.scoring.candidates.fused_top_k`), with the same items and values as ranking
the dense fused matrix. On several threads the fusion's neighbour search and the model's forward
run in parts that every thread takes from (the calling thread the forward's first, the helpers
the search's first).

The fusion's state is its own section of a checkpoint (:data:`SECTION`), beside the model's.
"""

from __future__ import annotations

from concurrent.futures import wait
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.threads import helper_threads
from basketgnn.recommenders.neural import NeuralRecommender, rank_dense
from basketgnn.recommenders.shared_scoring import forward_beside, ranked_in_parts
from basketgnn.scoring.candidates import SharedScores
from basketgnn.scoring.fusion import ScoreFusion
from basketgnn.scoring.fusion_choice import choose_fusion, fusion_choice
from basketgnn.scoring.item_pairs import TOP
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import DEFAULT_POOL_CAP

#: The checkpoint section holding the fusion's options, choice and state.
SECTION = "fusion"
#: Validation rows fused at a time while choosing (memory: chunk x I float64).
CHOICE_CHUNK = 2048


class FusionOptions(BaseModel):
    """How a trained model is fused with TIFU-KNN after training (keys of a model's config file)."""

    model_config = ConfigDict(extra="forbid")

    fusion: Literal["tifu", "off"] = Field(
        "tifu",
        description="After training, rank by (1 - w) * sigmoid(score) + w * TIFU-KNN's score "
        "scaled to [0, 1], w chosen on the validation customers from 0 (model alone) to 1 "
        "(TIFU-KNN alone) (tifu), or by the model alone (off).",
    )
    transitions: bool = Field(
        True,
        description="With fusion: tifu, also try adding nu * the customer's item-transition "
        "score (what training customers buy in the basket after one holding the customer's "
        "items), nu chosen on the validation customers, 0 included.",
    )
    rerank: bool = Field(
        True,
        description="With fusion: tifu, after the fusion learn a re-ranking of each customer's "
        "top 100 TIFU-KNN items from their features (the model's score, TIFU-KNN's parts, when "
        "and how regularly the customer bought each item) on the training customers, and keep "
        "it when it beats the fused order on the validation customers by more than one standard "
        "error (false: ship the fused order without trying). Learning it adds seconds to a "
        "minute to training. Where kept, ranking reads the 100 candidates instead of the "
        "catalogue: slower than the fused ranking on a catalogue of a few thousand items, "
        "faster on a large one. With fusion: off it is off unless set.",
    )
    rerank_pairs: int = Field(
        TOP,
        ge=0,
        description="With rerank: true, give the stage two more features of each candidate: "
        "how often the training customers buy it together with the customer's own items "
        "(cosine of the pair counts, summed and largest over the customer's items), from each "
        "item's this many most frequent pairs (0: without these features). They stay only "
        "where the stage with them beats the stage without them on the validation customers "
        "by more than one standard error; the table is then stored with the checkpoint: about "
        "8 bytes per kept pair.",
    )
    neighbour_pool_cap: int | None = Field(
        DEFAULT_POOL_CAP,
        ge=1,
        description="With fusion: tifu, search TIFU-KNN's neighbours among at most this many "
        "training customers, a seeded sample (null: every training customer).",
    )
    fusion_criterion: Literal["mean", "at10"] = Field(
        "mean",
        description="With fusion: tifu, what the validation choice maximises among the points "
        "at least TIFU-KNN alone's on every metric: the mean of recall, NDCG and PHR at 10 and "
        "20 (mean), or of the three at 10 alone (at10, for a page that shows ten items).",
    )

    @model_validator(mode="after")
    def _rerank_reads_tifu(self) -> FusionOptions:
        """The stage reads TIFU-KNN's parts: fusion: off turns the default stage off (left
        unset, so a later ``fusion: tifu`` brings the default back) and refuses a stage asked
        for by name."""
        if self.rerank and self.fusion == "off":
            if "rerank" in self.model_fields_set:
                raise ValueError("rerank: true reads TIFU-KNN's parts; it needs fusion: tifu")
            self.__dict__["rerank"] = False  # not marked as set by the user
        return self

    @classmethod
    def split(cls, values: dict[str, Any]) -> tuple[dict[str, Any], FusionOptions]:
        """A config mapping's fusion keys taken out: (the rest, these options). YAML reads a
        bare ``off`` as false, which means ``fusion: off``."""
        mine = {k: v for k, v in values.items() if k in cls.model_fields}
        if mine.get("fusion") is False:
            mine["fusion"] = "off"
        return {k: v for k, v in values.items() if k not in cls.model_fields}, cls(**mine)


def choose(
    base: NeuralRecommender, data: BasketData, train: Instances, validate: Instances, options: FusionOptions
) -> tuple[FusedRecommender | None, dict[str, Any] | None]:
    """The fusion ``options`` ask for, chosen on the validation customers from ``base``'s
    validation scores.

    Returns (the wrapper, or None when the model alone validated best; the choice as a record:
    weight, TIFU parameters, every grid point's criterion, a one-line ``description``), or
    (None, None) when ``options.fusion`` is off.
    """
    if options.fusion == "off":
        return None, None
    fusion = choose_fusion(
        base.validation_scores(data, validate), data, train, validate, chunk=CHOICE_CHUNK,
        pool_cap=options.neighbour_pool_cap, transitions=options.transitions,
        criterion=options.fusion_criterion,
    )
    choice = fusion_choice(fusion)
    return (FusedRecommender(base, fusion) if fusion.weight > 0 else None), choice


class FusedRecommender:
    """``base``'s scores fused with TIFU-KNN (module docstring); ``fusion.weight`` > 0. ``base``
    is a trained model (:class:`~basketgnn.recommenders.neural.NeuralRecommender`: any
    registered neural model)."""

    def __init__(self, base: NeuralRecommender, fusion: ScoreFusion) -> None:
        if fusion.weight <= 0 or fusion.scorer is None:
            raise ValueError("a fused recommender needs a fusion weight above 0 and its TIFU pool")
        self.base = base
        self.fusion = fusion
        self.name = base.name

    @property
    def item_ids(self) -> Any:
        """The wrapped model's catalogue."""
        return self.base.item_ids

    @property
    def checkpoint(self) -> dict[str, Any]:
        """The extras of the wrapped model's checkpoint (empty when trained in this process)."""
        return self.base.checkpoint

    def with_threads(self, threads: int | None) -> FusedRecommender:
        """Scoring on ``threads`` CPU threads (None: as configured); the same rows either way."""
        self.base.with_threads(threads)
        return self

    @property
    def needs_model(self) -> bool:
        """False for TIFU-KNN alone (λ = 1): the wrapped model's scores do not matter."""
        return self.fusion.weight < 1

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> FusedRecommender:
        raise RuntimeError("a fused recommender is made by recommenders.fused.choose after training")

    def search(self, data: BasketData, instances: Instances) -> SparseScores | None:
        """The fusion's addend λ · q (+ ν · t) of every instance: TIFU-KNN's neighbour search
        and the item transitions (compiled kernels that release the GIL)."""
        return self.fusion.prepare(data, instances)

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Fused scores. Shapes: -> [len(instances), I] float64."""
        if not self.needs_model:
            return self.fusion.apply(np.zeros((len(instances), data.n_items), np.float32), data, instances)
        # The search (GIL released) runs beside the model's scoring; deterministic either way.
        with helper_threads(1) as pool:
            found = pool.submit(self.search, data, instances)
            try:
                logits = self.base.score(data, instances)
            finally:
                wait([found])  # the search ends before the call returns or raises
            return self.fusion.apply(logits, data, instances, found.result())

    def rank(self, data: BasketData, instances: Instances, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each instance's top k of :meth:`score`, best first, ties to the lower item.

        Shapes: -> (items [n, min(k, I)] int64, scores [n, min(k, I)] float32).
        """
        k = min(int(k), data.n_items)
        n = len(instances)
        if n == 0:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        # On several threads the forward narrows torch's threads to one itself (torch_threads).
        self.base.setup(threads=self.base.threads <= 1)
        shared = self.base.shared_scores if self.base.has_shared_scores else None
        if self.fusion.transform != "sigmoid" or (self.needs_model and shared is None):
            return rank_dense(self.score(data, instances), k)
        if not self.needs_model:
            none = SharedScores(np.zeros(data.n_items, np.float32), np.zeros(n + 1, np.int64),
                                np.zeros(0, np.int64), np.zeros(0, np.float32))  # fmt: skip
            return _as_float32(self.fusion.top_k_shared(none, k, self.search(data, instances)))
        threads = self.base.threads
        if threads <= 1:
            found = self.search(data, instances)
            scores = shared(data, instances)
        else:
            scores, found = self._forward_beside_search(data, instances, threads)
        if scores is None:  # the model's configuration has no shared form
            return rank_dense(self.score(data, instances), k)
        model, addend = scores, found
        if addend is None:
            return _as_float32(self.fusion.top_k_shared(model, k, None))
        # Each customer's top k on its own: the rows in parts, on this thread and the helpers.
        ranked = ranked_in_parts(lambda a, b: self.fusion.top_k_shared(model.rows(a, b), k, addend.rows(a, b)), n, threads)
        return _as_float32(ranked)

    def _forward_beside_search(
        self, data: BasketData, instances: Instances, threads: int
    ) -> tuple[SharedScores | None, SparseScores]:
        """The model's shared scores and the search's addend, the forward's batches and the
        search's parts shared by this thread and threads - 1 helpers (:func:`forward_beside`)."""
        scores, found = forward_beside(self.base, data, instances, threads, lambda part: self.search(data, part))
        return scores, SparseScores.concat(found)

    def params(self) -> dict[str, Any]:
        """The model's parameters with what the fusion uses (the base reports its choice record
        when the workflow made or loaded it; else it is read off the fusion itself)."""
        p = dict(self.base.params())
        if "fusion_used" not in p:
            choice = fusion_choice(self.fusion)
            p["fusion_used"] = {k: v for k, v in choice.items() if k not in ("kind", "grid", "description")}
        return p

    def state(self) -> dict[str, Any]:
        """The fusion's checkpoint section (:func:`from_section` reads it back)."""
        return self.fusion.state()


def from_section(base: NeuralRecommender, state: dict[str, Any] | None) -> NeuralRecommender | FusedRecommender:
    """``base`` wrapped by the fusion a checkpoint section stored (``base`` itself when the
    section holds none: the model alone validated best, or the fusion was off). The section:
    ``{"options": FusionOptions, "choice": the choice record, "state": state()}``."""
    if not state or state.get("state") is None:
        return base
    fusion = ScoreFusion.from_state(state["state"])
    return FusedRecommender(base, fusion) if fusion.weight > 0 else base


def _as_float32(ranked: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return ranked[0], ranked[1].astype(np.float32)
