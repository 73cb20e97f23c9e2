"""BERT4Rec's options (beside the engine's training options)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from basketgnn.models.sequential import AttentionEncoderOptions


class BERT4RecConfig(AttentionEncoderOptions):
    """Paper settings (Sun et al. 2019, section 4.4): 2 blocks, 2 heads, feed-forward 4d, dropout 0.1,
    GELU, the softmax Cloze loss; the mask proportion ρ is tuned per data set (0.2 to 0.6 in the
    paper). The ``paper`` preset holds the rest; the defaults here train every prefix on the
    multi-label loss."""

    dim: int = Field(64, ge=1, description="Embedding and model size d (divisible by heads).")
    blocks: int = Field(2, ge=1, description="Number of bidirectional Transformer blocks.")
    heads: int = Field(2, ge=1, description="Attention heads per block.")
    ffn_dim: int = Field(256, ge=1, description="Hidden size of the point-wise feed-forward network (the paper: 4d).")
    dropout: float = Field(0.1, ge=0, lt=1, description="Dropout on embeddings, attention weights and sub-layers.")
    mask_prob: float = Field(
        0.2, ge=0, le=1, description="Cloze rate: each history basket is masked with this probability in training."
    )
    objective: Literal["multilabel", "softmax"] = Field(
        "multilabel",
        description="multilabel: the loss named by `loss` at every masked step; softmax: the paper's softmax over "
        "the catalogue, a masked basket's items sharing the target (cross-entropy against their uniform mix).",
    )
