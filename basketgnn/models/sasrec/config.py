"""SASRec's options (beside the engine's training options)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from basketgnn.models.sequential import AttentionEncoderOptions


class SASRecConfig(AttentionEncoderOptions):
    """Paper settings (Kang & McAuley 2018, section IV-C): d = 50, 2 blocks, dropout 0.2 on the
    dense MovieLens-1M and 0.5 on the sparse sets, lr 1e-3, batch 128, and the BCE objective
    with one sampled negative per step (the ``paper`` preset); heads > 1 is the multi-head
    variant the paper tried. The defaults here train every prefix on the multi-label loss."""

    dim: int = Field(64, ge=1, description="Embedding and model size d (divisible by heads).")
    blocks: int = Field(2, ge=1, description="Number of self-attention blocks.")
    heads: int = Field(1, ge=1, description="Attention heads per block (the paper: 1).")
    ffn_dim: int = Field(64, ge=1, description="Hidden size of the point-wise feed-forward network (the paper: d).")
    dropout: float = Field(0.2, ge=0, lt=1, description="Dropout on embeddings, attention weights and sub-layers.")
    objective: Literal["multilabel", "sampled_bce"] = Field(
        "multilabel",
        description="multilabel: the loss named by `loss` over the whole catalogue at the last step; sampled_bce: "
        "the paper's BCE at every step in one pass, one sampled negative per step (use with train_prefixes: false).",
    )
