"""DNNTSP behind the Recommender interface: ``fit`` trains, ``score`` runs the best model."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.errors import UserError
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig
from basketgnn.models.neighbours import fuse_neighbours
from basketgnn.train.checkpoint import load_checkpoint
from basketgnn.train.trainer import TrainResult, score_graphs, setup_torch, train_dnntsp


class DNNTSPRecommender:
    """Args:
        config: model and training settings (defaults: as published).
        out_dir: where training writes best.pt, resume.pt and train_log.jsonl (None: nowhere).
        progress: show a progress bar while training.
        on_epoch: called with each epoch's log record.
    """

    name = "dnntsp"

    def __init__(
        self,
        config: DNNTSPConfig | None = None,
        out_dir: str | Path | None = None,
        progress: bool = False,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config or DNNTSPConfig()
        self.out_dir = out_dir
        self.progress = progress
        self.on_epoch = on_epoch
        self.model: DNNTSP | None = None
        self.item_ids: np.ndarray | None = None
        self.result: TrainResult | None = None

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | None = None) -> DNNTSPRecommender:
        model, config, state = load_checkpoint(path, device or "cpu")
        rec = cls(config)
        rec.model = model
        rec.item_ids = np.asarray(state["item_ids"])
        rec.checkpoint = state
        return rec

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> DNNTSPRecommender:
        if validate is None or len(validate) == 0:
            raise UserError("DNNTSP needs validation instances to choose its best epoch.")
        self.model, self.result = train_dnntsp(
            data, train, validate, self.config, self.out_dir, self.progress, self.on_epoch
        )
        self.item_ids = data.item_ids
        return self

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Ranking scores [len(instances), I]: the model's logits (``score_graphs``), fused
        with TIFU-KNN (``scoring.fusion``) or neighbour scores when training chose so. The
        neighbour search never uses an instance's own customer id (``data.user_ids``)."""
        if self.model is None:
            raise RuntimeError("score() before fit() or from_checkpoint()")
        if data.n_items != self.model.num_items:
            raise ValueError(
                f"data has {data.n_items} items but the model {self.model.num_items}; "
                "align the data to the model's catalogue first (BasketData.aligned_to)"
            )
        device = setup_torch(self.config)
        fusion = self.model.fusion
        if fusion is not None and fusion.weight == 1:  # TIFU-KNN alone: the model is not needed
            shape = (len(instances), data.n_items)
            return fusion.apply(np.zeros(shape, np.float32), data, instances)
        if fusion is not None and fusion.weight > 0:
            # The TIFU neighbour search runs beside the model's scoring, as below.
            with ThreadPoolExecutor(max_workers=1) as fusion_thread:
                search = fusion_thread.submit(fusion.prepare, data, instances)
                graphs = build_user_graphs(data, instances, with_targets=False)
                logits = score_graphs(self.model, graphs, device)
                tifu = search.result()
            return fusion.apply(logits, data, instances, tifu)
        pool = self.model.neighbour_pool
        if pool is None:
            graphs = build_user_graphs(data, instances, with_targets=False)
            return score_graphs(self.model, graphs, device)
        # The neighbour search (mostly single-threaded numpy / sparse products, which release
        # the GIL) runs beside the model's scoring; deterministic either way.
        with ThreadPoolExecutor(max_workers=1) as pool_thread:
            search = pool_thread.submit(pool.scores, data, instances)
            graphs = build_user_graphs(data, instances, with_targets=False)
            logits = score_graphs(self.model, graphs, device)
            neighbours = search.result()
        return fuse_neighbours(logits, neighbours, self.model.neighbour_weight)

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = self.config.model_dump()
        if self.result is not None:
            p.update(best_epoch=self.result.best_epoch, epochs_run=self.result.epochs_run)
        if self.model is not None:
            pool = self.model.neighbour_pool  # None: neighbour_weight stays 0
            p.update(neighbour_weight_used=self.model.neighbour_weight,
                     neighbour_k_used=pool.k if pool is not None else None)
            if self.model.fusion is not None:
                p.update(fusion_used=self.model.fusion.summary())
        return p
