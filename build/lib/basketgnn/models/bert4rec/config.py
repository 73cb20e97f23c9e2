"""BERT4Rec's options (beside the engine's training options)."""

from __future__ import annotations

from pydantic import Field

from basketgnn.models.sequential import PrefixTrainedOptions


class BERT4RecConfig(PrefixTrainedOptions):
    """Paper defaults (Sun et al. 2019, section 4.4): 2 blocks, 2 heads, feed-forward 4d, dropout 0.1,
    GELU; the mask proportion ρ is tuned per data set (0.2 to 0.6 in the paper)."""

    dim: int = Field(64, ge=1, description="Embedding and model size d (divisible by heads).")
    blocks: int = Field(2, ge=1, description="Number of bidirectional Transformer blocks.")
    heads: int = Field(2, ge=1, description="Attention heads per block.")
    ffn_dim: int = Field(256, ge=1, description="Hidden size of the point-wise feed-forward network (the paper: 4d).")
    dropout: float = Field(0.1, ge=0, lt=1, description="Dropout on embeddings, attention weights and sub-layers.")
    mask_prob: float = Field(
        0.2, ge=0, le=1, description="Cloze rate: each history basket is masked with this probability in training."
    )
