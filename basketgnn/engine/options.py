"""Training options every neural model shares (a model's config subclasses :class:`TrainOptions`),
the ranking add-on's options among them (:mod:`basketgnn.engine.addons`)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator


class TrainOptions(BaseModel):
    """The engine's options: optimiser, schedule, early stopping, randomness, device, and the
    ranking add-on chosen after training (``fusion`` and the neighbour options), which every
    model has."""

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

    # The ranking add-on (engine.addons): acts after training, for every model.
    fusion: Literal["tifu", "neighbours", "off"] = Field(
        "tifu",
        description="Beyond the paper: after training, rank by (1 - w) * sigmoid(score) + w * "
        "TIFU-KNN's whole score (scaled to [0, 1]), TIFU tuned and w chosen on the validation "
        "customers from 0 (model alone) to 1 (TIFU-KNN alone) (tifu; basketgnn.scoring.fusion); "
        "the older neighbour-mean term (neighbours: see neighbour_weight); or the model alone "
        "(off). A config that sets neighbour_weight or neighbour_k but not fusion means "
        "neighbours (off when neighbour_weight is 0), as before.",
    )
    transitions: bool = Field(
        True,
        description="Beyond the paper (issue 11): with fusion: tifu, also try adding nu * the "
        "customer's item-transition score (what the training customers buy in the basket after "
        "one holding the customer's items; basketgnn.scoring.transitions), nu and how the score "
        "is read chosen on the validation customers with the fusion weight, 0 included.",
    )
    neighbour_weight: float | Literal["auto"] = Field(
        "auto",
        description="With fusion: neighbours, rank items by sigmoid(score) + neighbour_weight * "
        "n, n in [0, 1] being what the customer's nearest training customers buy (TIFU-KNN's "
        "neighbour mean, best item = 1). auto: chosen on the validation customers after "
        "training, 0 (off) included; 0: off; a number > 0: that weight.",
    )
    neighbour_k: int | Literal["auto"] = Field(
        "auto", description="Nearest training customers averaged (auto: 100 or 300, chosen on validation)."
    )
    neighbour_top: int = Field(100, ge=1, description="Neighbour-score entries kept per customer.")
    neighbour_pool_cap: int | None = Field(
        20_000,  # scoring.tifu.DEFAULT_POOL_CAP
        ge=1,
        description="With fusion: tifu, search TIFU's neighbours among at most this many training "
        "customers, a seeded sample (bounds the search on big logs; scoring.tifu.capped_pool). "
        "null: every training customer.",
    )

    @field_validator("neighbour_weight", "neighbour_k")
    @classmethod
    def _auto_or_at_least(cls, value: float | str, info: ValidationInfo) -> float | str:
        lowest = 0 if info.field_name == "neighbour_weight" else 1
        if not isinstance(value, str) and value < lowest:
            raise ValueError(f"must be 'auto' or a number >= {lowest}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _legacy_neighbour_options(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        if values.get("fusion") is False:  # YAML reads a bare `off` as false
            return {**values, "fusion": "off"}
        # Configs from before `fusion` meant the neighbour term when they set its options.
        if "fusion" in values:
            return values
        weight, k = values.get("neighbour_weight", "auto"), values.get("neighbour_k", "auto")
        if weight != "auto" or k != "auto":
            values = {**values, "fusion": "off" if weight == 0 else "neighbours"}
        return values

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
