"""What the training loop (:mod:`basketgnn.engine.trainer`) does around its epochs: early
stopping, the best checkpoint, the exact resume state and the per-epoch log.

Files in the run folder ``out``:
    best.pt            the best checkpoint (:mod:`basketgnn.engine.checkpoint`)
    resume.pt          the state after the last finished epoch (model, optimiser, scheduler, best)
    train_log.jsonl    one JSON object per finished epoch

Only one process writes them (rank 0 of a DDP run); the others get a :class:`RunFiles` whose
``writes`` is False and whose methods then write nothing.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from basketgnn.engine.checkpoint import add_extras, save_checkpoint
from basketgnn.io_utils import atomic_path, write_text
from basketgnn.models.options import TrainOptions

_LOG, _BEST, _RESUME = "train_log.jsonl", "best.pt", "resume.pt"


@dataclass
class EarlyStopping:
    """Stop after ``patience`` epochs without a better validation, but never before
    ``min_steps`` training steps (with few steps per epoch the first epochs can all be spent
    lowering every logit)."""

    patience: int
    min_steps: int
    stale: int = 0
    steps_done: int = 0

    def should_stop(self) -> bool:
        return self.stale >= self.patience and self.steps_done >= self.min_steps

    def update(self, improved: bool, steps: int) -> None:
        self.steps_done += steps
        self.stale = 0 if improved else self.stale + 1


@dataclass
class Best:
    """The best epoch so far: its number, validation metrics and weights (None before any)."""

    epoch: int = 0
    metrics: dict[str, float] = field(default_factory=lambda: {"mean_ndcg": -1.0})
    state: dict[str, torch.Tensor] | None = None

    def improves(self, val: dict[str, float]) -> bool:
        return val["mean_ndcg"] > self.metrics["mean_ndcg"]

    def take(self, epoch: int, val: dict[str, float], module: nn.Module) -> None:
        self.epoch, self.metrics, self.state = epoch, val, copy.deepcopy(module.state_dict())

    def as_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "metrics": self.metrics, "state": self.state}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Best:
        return cls(d["epoch"], d["metrics"], d["state"])


@dataclass
class RunFiles:
    """The run folder's files (module docstring); nothing is written when ``out`` is None or
    ``writes`` is False.

    ``extras`` go into every best.pt beside the epoch, validation metrics and data fingerprint.
    """

    out: Path | None
    writes: bool
    model_name: str
    config: TrainOptions
    item_ids: np.ndarray
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.out is not None and self.writes

    def start(self) -> None:
        if self.active:
            self.out.mkdir(parents=True, exist_ok=True)

    def clear(self) -> None:
        """A different run: its log and checkpoints start afresh, never mixed with the old."""
        if self.active:
            for stale_file in (_LOG, _BEST, _RESUME):
                (self.out / stale_file).unlink(missing_ok=True)

    def load_resume(self, key: str) -> dict[str, Any] | None:
        """resume.pt when it continues this run (same model, settings and ``key``)."""
        if not self.active:
            return None
        return _load_resume(self.out / _RESUME, self.model_name, self.config, key)

    def save_best(self, module: nn.Module, epoch: int, val: dict[str, float], fingerprint: str) -> None:
        if self.active:
            save_checkpoint(
                self.out / _BEST, self.model_name, module, self.config, self.item_ids,
                {"epoch": epoch, "validation": val, "data_fingerprint": fingerprint, **self.extras},
            )

    def end_epoch(self, record: dict[str, Any], module: nn.Module, optimizer: Any, scheduler: Any,
                  best: Best, history: list[dict[str, Any]], key: str) -> None:
        """The epoch's log line, then the resume state after it."""
        if not self.active:
            return
        with open(self.out / _LOG, "a") as f:
            f.write(json.dumps(record) + "\n")
        with atomic_path(self.out / _RESUME) as tmp:
            torch.save(
                {"model_name": self.model_name, "model": module.state_dict(),
                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "epoch": record["epoch"], "best": best.as_dict(), "history": history,
                 "config": self.config.model_dump(), "fingerprint": key},
                tmp,
            )  # fmt: skip

    def rewrite_log(self, history: list[dict[str, Any]]) -> None:
        """The log as of the resume state (epochs finished after it was written are dropped)."""
        if self.active:
            write_text(self.out / _LOG, "".join(json.dumps(r) + "\n" for r in history))

    def add_to_best(self, **extras: Any) -> None:
        if self.active and (self.out / _BEST).is_file():
            add_extras(self.out / _BEST, **extras)


def _load_resume(path: Path, model_name: str, config: TrainOptions, key: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    # Settings that do not change training: min_steps (like epochs) only says when to stop.
    # Under the cosine schedule, epochs sets the learning rate of every epoch, so it is part of
    # the run.
    ignored = ("device", "threads", "min_steps") + (() if config.lr_schedule == "cosine" else ("epochs",))
    # An option missing from the state (added since it was written) ran with its default.
    defaults = {name: f.get_default(call_default_factory=True) for name, f in type(config).model_fields.items()}
    written = {k: v for k, v in {**defaults, **state.get("config", {})}.items() if k not in ignored}
    wanted = {k: v for k, v in config.model_dump().items() if k not in ignored}
    if written != wanted or state.get("fingerprint") != key or state.get("model_name") != model_name:
        return None
    return state
