"""Training options every neural model shares (a model's config subclasses :class:`TrainOptions`)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class TrainOptions(BaseModel):
    """The engine's options: optimiser, schedule, early stopping, randomness, device."""

    model_config = ConfigDict(extra="forbid")

    loss: Literal["softmargin", "bpr", "mse"] = Field("softmargin", description="Training loss.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Adam weight decay.")
    batch_size: int = Field(64, ge=1, description="Users per batch.")
    batch_work: int = Field(
        200_000, ge=0,
        description="Beyond the paper: a batch also closes before sizes x longest history passes this (0: no bound).",
    )  # fmt: skip
    batch_order: Literal["bucketed", "shuffled", "ordered"] = Field(
        "bucketed",
        description="bucketed: seeded batches of similar history length; shuffled: a seeded permutation cut into "
        "batches; ordered: the data's order, the same batches every epoch (the DNNTSP authors' DataLoader).",
    )
    epochs: int = Field(100, ge=1, description="Maximum number of epochs.")
    patience: int = Field(10, ge=1, description="Stop after this many epochs without a better validation NDCG.")
    min_steps: int = Field(0, ge=0, description="Early stopping never stops a run before this many training steps.")
    lr_patience: int = Field(3, ge=0, description="ReduceLROnPlateau patience (epochs, on training loss).")
    lr_schedule: Literal["plateau", "cosine"] = Field(
        "plateau", description="plateau: ReduceLROnPlateau on the training loss (the paper's); cosine: to 0 over epochs."
    )
    train_prefixes: bool = Field(
        False, description="Beyond the paper: train on every prefix of each training history, not only the last basket."
    )
    seed: int = Field(0, description="Seed of initialisation and batch order.")
    device: str = Field("cpu", description="torch device, e.g. cpu or cuda.")
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = torch's default).")

    @model_validator(mode="after")
    def _work_bound_needs_buckets(self) -> TrainOptions:
        if self.batch_order != "bucketed" and self.batch_work:
            raise ValueError(
                f"batch_work bounds length-bucketed batches only; set batch_work: 0 with batch_order: {self.batch_order}"
            )
        return self

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
