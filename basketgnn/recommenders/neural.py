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
from concurrent.futures import Executor, wait
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from basketgnn.data.dataset import BasketData, _offsets
from basketgnn.data.split import Instances
from basketgnn.engine.batching import length_batches, score_source, score_work, source_sizes
from basketgnn.engine.checkpoint import load_checkpoint
from basketgnn.engine.trainer import TrainResult, setup_torch, train_model
from basketgnn.errors import UserError
from basketgnn.metrics import top_k
from basketgnn.models.options import TrainOptions
from basketgnn.models.spec import ModelSpec
from basketgnn.recommenders.threads import helper_threads, torch_threads
from basketgnn.scoring.candidates import SharedScores, fused_top_k

#: Instances per forward pass when scoring (``score`` and ``rank`` batch alike, so their
#: scores agree bit for bit).
SCORE_BATCH = 256


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
        return rec, ckpt.sections.get("fusion")

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> NeuralRecommender:
        if validate is None or len(validate) == 0:
            raise UserError(f"{self.name} needs validation instances to choose its best epoch.")
        self.model, self.result = train_model(
            self.spec, data, train, validate, self.config, self.out_dir, self.progress, self.on_epoch,
            warm_start=self.warm_start, extras=self.extras,
        )
        self.item_ids = data.item_ids
        return self

    @property
    def threads(self) -> int:
        """CPU threads for scoring: the config's ``threads``, else torch's."""
        return int(self.config.threads or torch.get_num_threads())

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

    def setup(self) -> torch.device:
        """torch's threads and float behaviour for scoring (the config's); returns the device.
        Called before scoring; a caller may narrow the threads afterwards."""
        return setup_torch(self.config)

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
        self.setup()
        scores = None
        if self.has_shared_scores:
            if self.threads <= 1:
                scores = self.shared_scores(data, instances)
            else:
                # The forward batch by batch on the worker threads (one torch thread each). The
                # batches are those of one thread, so the scores are the same.
                with helper_threads(self.threads) as pool, torch_threads(1):
                    scores = self.shared_scores(data, instances, pool)
        if scores is None:
            return rank_dense(self.score(data, instances), k)
        ranked = fused_top_k(scores, k)
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
        self, data: BasketData, instances: Instances, pool: Executor | None = None
    ) -> SharedScores | None:
        """The module's scores as one shared row plus each instance's own entries (the spec's
        ``score_sparse``, batched as :meth:`score` batches, on ``pool``'s threads when given),
        or None when the model or its configuration has no such form. torch's threads are the
        caller's (:meth:`setup`)."""
        plan = self.shared_plan(data, instances)
        if plan is None:
            return None
        if pool is None:
            return plan.assemble([plan.forward(b) for b in plan.batches])
        futures = [pool.submit(plan.forward, b) for b in plan.batches]
        wait(futures)  # every batch ends before an error goes up: none runs on after the call
        return plan.assemble([f.result() for f in futures])

    def shared_plan(self, data: BasketData, instances: Instances) -> SharedPlan | None:
        """:meth:`shared_scores` as batches that any thread may run (``plan.forward`` of each
        of ``plan.batches``, then ``plan.assemble`` of the results in batch order): the
        instances' graphs are built here. None when the spec has no ``score_sparse``."""
        self._check(data)
        module, score_sparse = self.model, self.spec.score_sparse
        if score_sparse is None:
            return None
        device = torch.device(self.config.device)
        module.eval()
        source = self.spec.batches(data, instances, self.config, False)

        def forward(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
            with torch.inference_mode():  # per thread
                out = score_sparse(module, source.collate(idx, with_targets=False).to(device))
                if out is None:
                    return None
                base, value = out.base.float().cpu().numpy(), out.value.float().cpu().numpy()  # [I], [M]
                return base, idx[out.row.cpu().numpy()], out.item.cpu().numpy(), value

        # Longest histories first: threads that share the batches then end on short ones and
        # finish together. The batches themselves (and so the scores) are score()'s.
        batches = length_batches(source.lengths, SCORE_BATCH, None, source_sizes(source), score_work(self.config, SCORE_BATCH))
        return SharedPlan(batches[::-1] if self.longest_first else batches, forward, len(instances))

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = self.config.model_dump()
        if self.result is not None:
            p.update(best_epoch=self.result.best_epoch, epochs_run=self.result.epochs_run)
        elif "epoch" in self.checkpoint:
            p.update(best_epoch=self.checkpoint["epoch"])
        if self.fusion_choice is not None:  # what validation chose, the model alone (weight 0) included
            p["fusion_used"] = {k: v for k, v in self.fusion_choice.items() if k not in ("kind", "grid", "description")}
        return p


class SharedPlan:
    """The forward batches of :meth:`NeuralRecommender.shared_scores` (``forward`` of each of
    ``batches``, on any thread) and how their results make the instances' SharedScores."""

    def __init__(self, batches: list[np.ndarray], forward: Callable[[np.ndarray], Any], n: int) -> None:
        self.batches, self.forward, self.n = batches, forward, n

    def assemble(self, done: list[Any]) -> SharedScores | None:
        """The SharedScores of the ``forward`` results in batch order (None when the
        configuration has no shared form)."""
        if any(d is None for d in done):
            return None
        parts = [d for d in done if d is not None]
        base = parts[0][0]  # [I], the same in every batch
        row = np.concatenate([p[1] for p in parts]).astype(np.int64)
        order = np.argsort(row, kind="stable")
        offsets = _offsets(np.bincount(row, minlength=self.n))
        items = np.concatenate([p[2] for p in parts]).astype(np.int64)[order]
        return SharedScores(base, offsets, items, np.concatenate([p[3] for p in parts])[order])


def rank_dense(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k of a score matrix and their scores. Shapes: [n, I] -> ([n, k] int64, [n, k] float32)."""
    items = top_k(scores, k)
    return items, np.take_along_axis(scores, items, axis=1).astype(np.float32)
