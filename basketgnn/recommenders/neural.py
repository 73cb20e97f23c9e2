"""Any trained neural model behind the :class:`~basketgnn.recommenders.base.Recommender`
interface: ``fit`` trains it with the engine, ``score`` runs the best module, and ``rank`` gives
each instance's top k of those scores.

``rank`` is what ``recommend`` and the evaluation harness call. For a model whose spec declares
``score_sparse`` (DNNTSP's default configuration: an item outside a customer's history scores
the same for everyone) it never builds the [n, I] score matrix: the module returns one shared row
plus each customer's own entries (:meth:`NeuralRecommender.shared_scores`), and
:func:`basketgnn.scoring.candidates.fused_top_k` ranks a few candidates per customer, with the
same items, values and ties as ranking ``score``'s matrix. Every other model ranks the matrix.
The fusion with TIFU-KNN wraps this recommender from outside
(:mod:`basketgnn.recommenders.fused`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.batching import SCORE_BATCH, score_source, score_work
from basketgnn.engine.checkpoint import load_checkpoint
from basketgnn.engine.threads import torch_thread_count
from basketgnn.engine.trainer import TrainResult, ValidationRank, setup_torch, train_model
from basketgnn.errors import UserError
from basketgnn.metrics import top_k
from basketgnn.models.options import TrainOptions
from basketgnn.models.spec import ModelSpec
from basketgnn.recommenders.shared_scoring import (
    SharedPlan,
    ranked_in_parts,
    run_shared,
    shared_plan,
    shared_ranking,
)
from basketgnn.scoring.candidates import SharedScores, fused_top_k


class NeuralRecommender:
    """Args:
        spec: the model (``basketgnn.registry.get_spec(name)``).
        config: its options (default: ``spec.config_cls()``).
        out_dir: where training writes best.pt, resume.pt and train_log.jsonl (None: nowhere).
        progress: show a progress bar while training (at a terminal only).
        on_epoch: called with each epoch's log record.
        warm_start: an earlier run's checkpoint of the same model to start training from
            (:mod:`basketgnn.engine.warm_start`; None: from scratch).
        extras: stored in every best.pt the training writes (the caller's own records).
    """

    #: False: :meth:`shared_plan` runs its batches shortest history first (benchmarks).
    longest_first: bool = True

    def __init__(
        self,
        spec: ModelSpec,
        config: TrainOptions | None = None,
        out_dir: str | Path | None = None,
        progress: bool = False,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
        warm_start: str | Path | None = None,
        extras: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.config = config if config is not None else spec.config_cls()
        self.out_dir = out_dir
        self.progress = progress
        self.on_epoch = on_epoch
        self.warm_start = warm_start
        self.extras = dict(extras or {})
        self.model: nn.Module | None = None
        self.item_ids: np.ndarray | None = None
        self.result: TrainResult | None = None
        self.checkpoint: dict[str, Any] = {}  # the extras of a loaded checkpoint
        self.sections: dict[str, Any] = {}  # the sections of a loaded checkpoint (layers above the model)
        #: What the fusion step chose after training (the model alone: weight 0), if it ran.
        self.fusion_choice: dict[str, Any] | None = None

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | None = None) -> tuple[NeuralRecommender, Any]:
        """The checkpoint's model, and the checkpoint's section ``fusion`` (None: none) for the
        layer that wraps the model in its fusion (:func:`basketgnn.workflow.load_trained`)."""
        ckpt = load_checkpoint(path, device or "cpu")
        rec = cls(ckpt.spec, ckpt.config)
        rec.model = ckpt.module
        rec.item_ids = ckpt.item_ids
        rec.checkpoint = ckpt.extras
        rec.sections = ckpt.sections
        return rec, ckpt.sections.get("fusion")

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> NeuralRecommender:
        if validate is None or len(validate) == 0:
            raise UserError(f"{self.name} needs validation instances to choose its best epoch.")
        self.model, self.result = train_model(
            self.spec, data, train, validate, self.config, self.out_dir, self.progress, self.on_epoch,
            warm_start=self.warm_start, extras=self.extras, validation_rank=self._validation_rank(data.n_items),
        )
        self.item_ids = data.item_ids
        return self

    def _validation_rank(self, n_items: int) -> ValidationRank | None:
        """How training validates: from the scores in shared form on the scoring threads where
        the spec has that form and validation is long enough to gain from the threads (the same
        ranking as the dense scores', without the [n, I] matrix), else the engine's dense
        ranking (:func:`shared_ranking`)."""
        if self.spec.score_sparse is None:
            return None
        return shared_ranking(self.spec.score_sparse, self.threads, n_items)

    @property
    def threads(self) -> int:
        """CPU threads for scoring: the config's ``threads``, else torch's (as set outside a
        ranking call's narrowing, :func:`~basketgnn.engine.threads.torch_thread_count`)."""
        return int(self.config.threads or torch_thread_count())

    def with_threads(self, threads: int | None) -> NeuralRecommender:
        """Scoring on ``threads`` CPU threads (None: as configured); the same rows either way."""
        if threads is not None:
            self.config = self.config.model_copy(update={"threads": threads})
        return self

    @property
    def has_shared_scores(self) -> bool:
        """Whether the spec declares ``score_sparse`` (:meth:`shared_scores` may still return
        None for a configuration without that form)."""
        return self.spec.score_sparse is not None

    def setup(self, threads: bool = True) -> torch.device:
        """torch's threads (unless not ``threads``) and float behaviour for scoring (the
        config's); returns the device. Called before scoring; a caller may narrow the threads
        afterwards. A ranking whose forward runs on helper threads with one torch thread each
        (:func:`~basketgnn.engine.threads.torch_threads`) leaves the count as it is: inside a
        job's block it stays narrowed from call to call, and setting it costs milliseconds."""
        return setup_torch(self.config, threads)

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """The module's logits, batched as the engine's validation batches them (``score_work``).
        Shapes: -> [len(instances), I] float32."""
        self._check(data)
        device = setup_torch(self.config)
        source = self.spec.batches(data, instances, self.config, False)
        with torch.inference_mode():
            return score_source(self.model, source, data.n_items, device, SCORE_BATCH, score_work(self.config, SCORE_BATCH))

    def validation_scores(self, data: BasketData, validate: Instances) -> np.ndarray:
        """:meth:`score` of the validation customers (batched as in training's validation), for
        choices made after training. Shapes: -> [len(validate), I] float32."""
        return self.score(data, validate)

    def rank(self, data: BasketData, instances: Instances, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each instance's top k by :meth:`score`, best first, ties to the lower item, and
        their scores: equal to ``metrics.top_k`` of :meth:`score`'s matrix (module docstring).

        Shapes: -> (items [n, min(k, I)] int64, scores [n, min(k, I)] float32).
        """
        self._check(data)
        k = min(int(k), data.n_items)
        if len(instances) == 0:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        self.setup(threads=not (self.has_shared_scores and self.threads > 1))
        scores = None
        if self.has_shared_scores:
            # On several threads the forward batch by batch on the helper threads (one torch
            # thread each). The batches are those of one thread, so the scores are the same.
            scores = self.shared_scores(data, instances, self.threads)
        if scores is None:
            return rank_dense(self.score(data, instances), k)
        shared = scores
        ranked = ranked_in_parts(lambda a, b: fused_top_k(shared.rows(a, b), k), len(instances), self.threads)
        return ranked[0], ranked[1].astype(np.float32)

    def _check(self, data: BasketData) -> None:
        if self.model is None:
            raise RuntimeError("score() before fit() or from_checkpoint()")
        n_items = len(self.item_ids) if self.item_ids is not None else data.n_items
        if data.n_items != n_items:
            raise ValueError(
                f"data has {data.n_items} items but the model {n_items}; "
                "align the data to the model's catalogue first (BasketData.aligned_to)"
            )

    def shared_scores(
        self, data: BasketData, instances: Instances, threads: int = 1, wanted: np.ndarray | None = None
    ) -> SharedScores | None:
        """The module's scores as one shared row plus each instance's own entries (the spec's
        ``score_sparse``, batched as :meth:`score` batches, on ``threads`` threads), or None
        when the model or its configuration has no such form; with ``wanted`` [n, C], right
        at those items of each instance only (:meth:`SharedPlan.reading`). torch's threads are
        the caller's (:meth:`setup`)."""
        plan = self.shared_plan(data, instances)
        if plan is not None and wanted is not None:
            plan = plan.reading(wanted)
        return None if plan is None else run_shared(plan, threads)

    def shared_plan(self, data: BasketData, instances: Instances) -> SharedPlan | None:
        """:meth:`shared_scores` as batches that any thread may run (``plan.forward`` of each
        of ``plan.batches``, then ``plan.assemble`` of the results in batch order): the
        instances' graphs are built here. None when the spec has no ``score_sparse``. The
        batches are :meth:`score`'s, longest histories first (``longest_first``)."""
        self._check(data)
        if self.spec.score_sparse is None:
            return None
        source = self.spec.batches(data, instances, self.config, False)
        return shared_plan(self.model, self.spec.score_sparse, source, torch.device(self.config.device),
                           SCORE_BATCH, score_work(self.config, SCORE_BATCH), self.longest_first)  # fmt: skip

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = self.config.model_dump()
        if self.result is not None:
            p.update(best_epoch=self.result.best_epoch, epochs_run=self.result.epochs_run)
        elif "epoch" in self.checkpoint:
            p.update(best_epoch=self.checkpoint["epoch"])
        if self.fusion_choice is not None:  # what validation chose, the model alone (weight 0) included
            p["fusion_used"] = {k: v for k, v in self.fusion_choice.items() if k not in ("kind", "grid", "description")}
        return p


def rank_dense(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k of a score matrix and their scores. Shapes: [n, I] -> ([n, k] int64, [n, k] float32)."""
    items = top_k(scores, k)
    return items, np.take_along_axis(scores, items, axis=1).astype(np.float32)
