"""Any neural model behind the Recommender interface: ``fit`` trains it with the engine,
``score`` runs the best module (and its ranking add-on, when validation chose one), and ``rank``
gives each instance's top k of those scores.

``rank`` is what ``recommend`` and the evaluation harness call. For a module whose scores are
shared outside each customer's history (``forward_sparse``: DNNTSP's default configuration) with
no add-on or the TIFU fusion, it never builds the [n, I] score matrix: the module returns one
shared row plus each customer's own items, and :func:`basketgnn.scoring.candidates.fused_top_k`
ranks a few candidates per customer, with the same items, values and ties as ranking
``score``'s matrix. Every other model or add-on ranks ``score``'s matrix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from basketgnn.data.dataset import BasketData, _offsets
from basketgnn.data.split import Instances
from basketgnn.engine.addons import FusionAddOn, NeighbourAddOn, RankingAddOn
from basketgnn.engine.checkpoint import load_checkpoint
from basketgnn.engine.options import TrainOptions
from basketgnn.engine.spec import ModelSpec
from basketgnn.engine.trainer import (
    TrainResult,
    length_batches,
    score_source,
    setup_torch,
    train_model,
)
from basketgnn.errors import UserError
from basketgnn.metrics import top_k
from basketgnn.scoring.candidates import SharedScores, fused_top_k
from basketgnn.scoring.tifu import SparseScores

#: Instances per forward pass when scoring (``score`` and ``rank`` batch alike, so their
#: scores agree bit for bit).
SCORE_BATCH = 256
#: Instances per part of the add-on's search when ``rank`` runs on several threads: small
#: enough that the parts even out the threads' ends (~30 ms each on TaFeng).
SEARCH_PART = 256


class NeuralRecommender:
    """Args:
        spec: the model (``basketgnn.registry.get_spec(name)``).
        config: its options (default: ``spec.config_cls()``).
        out_dir: where training writes best.pt, resume.pt and train_log.jsonl (None: nowhere).
        progress: show a progress bar while training (at a terminal only).
        on_epoch: called with each epoch's log record.
        warm_start: an earlier run's checkpoint of the same model to start training from
            (:mod:`basketgnn.engine.warm_start`; None: from scratch).
    """

    def __init__(
        self,
        spec: ModelSpec,
        config: TrainOptions | None = None,
        out_dir: str | Path | None = None,
        progress: bool = False,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
        warm_start: str | Path | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.config = config if config is not None else spec.config_cls()
        self.out_dir = out_dir
        self.progress = progress
        self.on_epoch = on_epoch
        self.warm_start = warm_start
        self.model: nn.Module | None = None
        self.addon: RankingAddOn | None = None
        self.item_ids: np.ndarray | None = None
        self.result: TrainResult | None = None
        self.checkpoint: dict[str, Any] = {}  # the extras of a loaded checkpoint

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | None = None) -> NeuralRecommender:
        ckpt = load_checkpoint(path, device or "cpu")
        rec = cls(ckpt.spec, ckpt.config)
        rec.model = ckpt.module
        rec.addon = ckpt.addon
        rec.item_ids = ckpt.item_ids
        rec.checkpoint = ckpt.extras
        return rec

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> NeuralRecommender:
        if validate is None or len(validate) == 0:
            raise UserError(f"{self.name} needs validation instances to choose its best epoch.")
        self.model, self.addon, self.result = train_model(
            self.spec, data, train, validate, self.config, self.out_dir, self.progress, self.on_epoch,
            warm_start=self.warm_start,
        )
        self.item_ids = data.item_ids
        return self

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Ranking scores [len(instances), I]: the module's logits, or the add-on's fused
        scores (the module is not run when the add-on does not need it: TIFU-KNN alone). The
        add-on never uses an instance's own customer id (``data.user_ids``) as a neighbour."""
        self._check(data)
        device = setup_torch(self.config)
        addon = self.addon
        if addon is None:
            return self._dense_scores(data, instances, device)
        if not addon.needs_model:
            return addon.fuse(np.zeros((len(instances), data.n_items), np.float32), addon.search(data, instances))
        # The add-on's search (mostly single-threaded numpy / sparse products, which release
        # the GIL) runs beside the model's scoring; deterministic either way.
        with ThreadPoolExecutor(max_workers=1) as pool_thread:
            search = pool_thread.submit(addon.search, data, instances)
            logits = self._dense_scores(data, instances, device)
            found = search.result()
        return addon.fuse(logits, found)

    def rank(self, data: BasketData, instances: Instances, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each instance's top k by :meth:`score`, best first, ties to the lower item, and
        their scores: equal to ``metrics.top_k`` of :meth:`score`'s matrix (module docstring).

        Shapes: -> (items [n, min(k, I)] int64, scores [n, min(k, I)] float32).
        """
        self._check(data)
        k = min(int(k), data.n_items)
        addon = self.addon
        fusion = addon.fusion if isinstance(addon, FusionAddOn) else None
        shared = callable(getattr(self.model, "forward_sparse", None))
        candidates = (addon is None or (fusion is not None and fusion.transform == "sigmoid")) and (
            shared or (addon is not None and not addon.needs_model)
        )
        if len(instances) == 0:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        if not candidates:
            return self._rank_dense(data, instances, k)
        device = setup_torch(self.config)
        if addon is not None and not addon.needs_model:  # TIFU-KNN alone: the model is not run
            n = len(instances)
            none = SharedScores(np.zeros(data.n_items, np.float32), np.zeros(n + 1, np.int64),
                                np.zeros(0, np.int64), np.zeros(0, np.float32))  # fmt: skip
            return _as_float32(fusion.top_k_shared(none, k, addon.search(data, instances)))  # type: ignore[union-attr]
        threads = self._threads()
        if threads <= 1:
            found = addon.search(data, instances) if addon is not None else None
            scores = self._shared_scores(data, instances, device)
        elif addon is None:
            # The module alone: its forward batch by batch on the worker threads (one torch
            # thread each). The batches are those of one thread, so the scores are the same.
            with ThreadPoolExecutor(max_workers=threads) as pool, _torch_threads(1):
                scores = self._shared_scores(data, instances, device, pool)
            found = None
        else:
            # The add-on's search (compiled kernels that release the GIL) in small parts on
            # threads - 1 helpers, while this thread builds the graphs and runs the module's
            # forward (one torch thread), then takes the parts still left: the two kinds of work
            # overlap instead of queueing, and the parts even out the end. Each part's result is
            # the one a single search gives its customers, so the output does not depend on who
            # searched what.
            parts = _SharedParts(
                [_take(instances, idx) for idx in np.array_split(np.arange(len(instances)),
                 max(1, -(-len(instances) // SEARCH_PART)))],
                lambda part: addon.search(data, part),
            )  # fmt: skip
            with ThreadPoolExecutor(max_workers=threads - 1) as pool, _torch_threads(1):
                helpers = [pool.submit(parts.drain) for _ in range(threads - 1)]
                try:
                    scores = self._shared_scores(data, instances, device)
                    parts.drain()
                except BaseException:
                    parts.stop()  # the helpers finish their part and stop; the error goes up
                    raise
                for h in helpers:
                    h.result()  # a part's error
            found = SparseScores.concat(parts.results())
        if scores is None:  # the module's configuration scores items outside a history per user
            return self._rank_dense(data, instances, k)
        if fusion is None:
            return _as_float32(fused_top_k(scores, k))
        return _as_float32(fusion.top_k_shared(scores, k, found))

    def _threads(self) -> int:
        """CPU threads for scoring: the config's ``threads``, else torch's."""
        return int(self.config.threads or torch.get_num_threads())

    def _check(self, data: BasketData) -> None:
        if self.model is None:
            raise RuntimeError("score() before fit() or from_checkpoint()")
        n_items = len(self.item_ids) if self.item_ids is not None else data.n_items
        if data.n_items != n_items:
            raise ValueError(
                f"data has {data.n_items} items but the model {n_items}; "
                "align the data to the model's catalogue first (BasketData.aligned_to)"
            )

    def _dense_scores(self, data: BasketData, instances: Instances, device: torch.device) -> np.ndarray:
        assert self.model is not None
        source = self.spec.batches(data, instances, self.config, False)
        with torch.inference_mode():
            return score_source(self.model, source, data.n_items, device, SCORE_BATCH)

    def _rank_dense(self, data: BasketData, instances: Instances, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = self.score(data, instances)
        items = top_k(scores, k)
        return items, np.take_along_axis(scores, items, axis=1).astype(np.float32)

    def _shared_scores(
        self, data: BasketData, instances: Instances, device: torch.device, pool: ThreadPoolExecutor | None = None
    ) -> SharedScores | None:
        """The module's scores as one shared row plus each instance's own entries (the
        module's ``forward_sparse``, batched as :meth:`score` batches, on ``pool``'s threads
        when given), or None when the module's configuration has no such form."""
        module = self.model
        assert module is not None
        module.eval()
        source = self.spec.batches(data, instances, self.config, False)

        def forward(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
            with torch.inference_mode():  # per thread
                batch = source.collate(idx, with_targets=False).to(device)
                out = module.forward_sparse(batch)  # type: ignore[operator]
                if out is None:
                    return None
                base, node = out[0].float().cpu().numpy(), out[1].float().cpu().numpy()  # [I], [M]
                return base, idx[batch.node_user.cpu().numpy()], batch.node_item.cpu().numpy(), node

        batches = length_batches(source.lengths, SCORE_BATCH, None)
        done = list(pool.map(forward, batches)) if pool is not None else [forward(idx) for idx in batches]
        if any(d is None for d in done):
            return None
        parts = [d for d in done if d is not None]
        base = parts[0][0]  # [I], the same in every batch
        row = np.concatenate([p[1] for p in parts]).astype(np.int64)
        order = np.argsort(row, kind="stable")
        offsets = _offsets(np.bincount(row, minlength=len(instances)))
        items = np.concatenate([p[2] for p in parts]).astype(np.int64)[order]
        return SharedScores(base, offsets, items, np.concatenate([p[3] for p in parts])[order])

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = self.config.model_dump()
        if self.result is not None:
            p.update(best_epoch=self.result.best_epoch, epochs_run=self.result.epochs_run)
        if self.model is not None:
            addon = self.addon
            # None: the neighbour weight stays 0
            neighbours = addon if isinstance(addon, NeighbourAddOn) else None
            p.update(neighbour_weight_used=neighbours.weight if neighbours is not None else 0.0,
                     neighbour_k_used=neighbours.pool.k if neighbours is not None else None)
            choice = self.result.addon.as_dict() if self.result and self.result.addon else (
                self.checkpoint.get("addon_choice"))
            if choice is not None and choice.get("kind") == "tifu-fusion":
                # What validation chose, the model alone (weight 0) included.
                p["fusion_used"] = {k: v for k, v in choice.items() if k not in ("kind", "grid", "description")}
        return p


class _SharedParts:
    """Parts of a job that any number of threads take in turn, each part once (``drain``);
    ``results`` in part order. An error in a part is raised by the thread that ran it, and the
    other threads stop taking parts (as after ``stop``)."""

    def __init__(self, parts: list[Any], run: Callable[[Any], Any]) -> None:
        self._parts, self._run = parts, run
        self._results: list[Any] = [None] * len(parts)
        self._next = 0
        self._failed = False
        self._lock = threading.Lock()

    def drain(self) -> None:
        while True:
            with self._lock:
                i = self._next
                if self._failed or i >= len(self._parts):
                    return
                self._next += 1
            try:
                self._results[i] = self._run(self._parts[i])
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """No part is started after this (the ones running finish)."""
        self._failed = True

    def results(self) -> list[Any]:
        return self._results


def _take(instances: Instances, rows: np.ndarray) -> Instances:
    return Instances(instances.users[rows], instances.n_history[rows])


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _as_float32(ranked: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return ranked[0], ranked[1].astype(np.float32)
