"""DIN's options (beside the engine's training options)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from basketgnn.models.sequential import SequenceOptions


class DINConfig(SequenceOptions):
    """Layer sizes of the paper's Fig. 2 (activation unit 36, MLP 200-80). The training defaults
    (lr, epochs, patience) keep `basketgnn train --model din` on DC to minutes on one core."""

    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    epochs: int = Field(30, ge=1, description="Maximum number of epochs.")
    patience: int = Field(3, ge=1, description="Stop after this many epochs without a better validation NDCG.")

    dim: int = Field(32, ge=1, description="Item embedding size d.")
    attention_hidden: list[int] = Field([36], description="Hidden sizes of the activation unit's MLP.")
    hidden: list[int] = Field([200, 80], description="Hidden sizes of the scoring MLP over [v_u(t), t].")
    activation: Literal["prelu", "dice"] = Field("prelu", description="Activation of both MLPs: PReLU or Dice.")
    history: Literal["baskets", "items"] = Field(
        "baskets", description="Attend over pooled basket embeddings (cheap) or every history item."
    )
    train_negatives: int = Field(
        256, ge=0,
        description="Train on each batch's target items plus this many random others (0: every item).",
    )
    max_chunk_elements: int = Field(
        1 << 22, ge=1, description="Catalogue chunk size bound: numbers in one chunk's [B, C, T, 4d] attention input."
    )
