"""SASRec's options (beside the engine's training options)."""

from __future__ import annotations

from pydantic import Field

from basketgnn.models.sequential import PrefixTrainedOptions


class SASRecConfig(PrefixTrainedOptions):
    """Paper defaults (Kang & McAuley 2018, section IV-C): d = 50, 2 blocks, dropout 0.2 on the
    dense MovieLens-1M and 0.5 on the sparse sets, lr 1e-3; heads > 1 is the multi-head variant
    the paper tried."""

    dim: int = Field(64, ge=1, description="Embedding and model size d (divisible by heads).")
    blocks: int = Field(2, ge=1, description="Number of self-attention blocks.")
    heads: int = Field(1, ge=1, description="Attention heads per block (the paper: 1).")
    ffn_dim: int = Field(64, ge=1, description="Hidden size of the point-wise feed-forward network (the paper: d).")
    dropout: float = Field(0.2, ge=0, lt=1, description="Dropout on embeddings, attention weights and sub-layers.")
