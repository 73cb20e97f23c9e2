"""Training options every neural model shares (a model's config subclasses :class:`TrainOptions`)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator


class TrainOptions(BaseModel):
    """The engine's options: optimiser, schedule, early stopping, randomness, device."""

    model_config = ConfigDict(extra="forbid")

    loss: Literal["softmargin", "bpr", "mse"] = Field("softmargin", description="Training loss.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Adam weight decay.")
    batch_size: int = Field(64, ge=1, description="Users per batch.")
    batch_work: int = Field(
        200_000,
        ge=0,
        description="Beyond the paper: a training batch also closes before its work, the sum "
        "of its customers' sizes times its longest history (DNNTSP: nodes x T_max), passes "
        "this (0 = no bound; models whose data has no size are not bounded). Long histories "
        "then get fewer customers per batch, so a step's memory stays bounded. The default "
        "leaves every DC and TaFeng batch at batch_size customers.",
    )
    epochs: int = Field(100, ge=1, description="Maximum number of epochs.")
    patience: int = Field(10, ge=1, description="Stop after this many epochs without a better validation NDCG.")
    min_steps: int = Field(
        0,
        ge=0,
        description="Early stopping (patience) never stops a run before this many training "
        "steps (batches of the epochs' plans, skipped ones included), so a run with few steps "
        "per epoch is not stopped while its first epochs are still spent lowering every logit.",
    )
    lr_patience: int = Field(3, ge=0, description="ReduceLROnPlateau patience (epochs, on training loss).")
    lr_schedule: Literal["plateau", "cosine"] = Field(
        "plateau",
        description="Learning-rate schedule: plateau (the paper's: ReduceLROnPlateau on the "
        "training loss, see lr_patience) or cosine (beyond the paper, as PIETSP: lr * (1 + "
        "cos(pi * e / epochs)) / 2 after epoch e, so epochs sets the schedule's length).",
    )
    train_prefixes: bool = Field(
        False,
        description="Beyond the paper: train on every prefix of each training history "
        "(predict basket h from baskets < h for every h), not only on the last basket.",
    )
    seed: int = Field(0, description="Seed of initialisation and batch order.")
    device: str = Field("cpu", description="torch device, e.g. cpu or cuda.")
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = torch's default).")

    @field_validator("device")
    @classmethod
    def _device_exists(cls, value: str) -> str:
        try:
            device = torch.device(value)
        except RuntimeError as e:
            raise ValueError(f"not a torch device ({e})") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("CUDA is not available on this machine; use device: cpu")
        return value
