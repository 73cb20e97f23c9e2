"""Any neural model behind the Recommender interface: ``fit`` trains it with the engine,
``score`` runs the best module (and its ranking add-on, when validation chose one)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.addons import NeighbourAddOn, RankingAddOn
from basketgnn.engine.checkpoint import load_checkpoint
from basketgnn.engine.options import TrainOptions
from basketgnn.engine.spec import ModelSpec
from basketgnn.engine.trainer import TrainResult, score_source, setup_torch, train_model
from basketgnn.errors import UserError


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
        if self.model is None:
            raise RuntimeError("score() before fit() or from_checkpoint()")
        n_items = len(self.item_ids) if self.item_ids is not None else data.n_items
        if data.n_items != n_items:
            raise ValueError(
                f"data has {data.n_items} items but the model {n_items}; "
                "align the data to the model's catalogue first (BasketData.aligned_to)"
            )
        device = setup_torch(self.config)
        addon = self.addon
        if addon is None:
            source = self.spec.batches(data, instances, self.config, False)
            return score_source(self.model, source, data.n_items, device)
        if not addon.needs_model:
            return addon.fuse(np.zeros((len(instances), data.n_items), np.float32), addon.search(data, instances))
        # The add-on's search (mostly single-threaded numpy / sparse products, which release
        # the GIL) runs beside the model's scoring; deterministic either way.
        with ThreadPoolExecutor(max_workers=1) as pool_thread:
            search = pool_thread.submit(addon.search, data, instances)
            source = self.spec.batches(data, instances, self.config, False)
            logits = score_source(self.model, source, data.n_items, device)
            found = search.result()
        return addon.fuse(logits, found)

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
