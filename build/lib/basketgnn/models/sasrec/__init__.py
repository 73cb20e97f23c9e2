"""SASRec for baskets: causal self-attention over pooled basket embeddings (docs/models.md)."""

from __future__ import annotations

from basketgnn.models.sasrec.config import SASRecConfig
from basketgnn.models.sasrec.model import SASRec
from basketgnn.models.sequential import batches
from basketgnn.models.spec import ModelSpec


def build(n_items: int, config: SASRecConfig) -> SASRec:
    return SASRec(
        n_items, dim=config.dim, blocks=config.blocks, heads=config.heads, ffn_dim=config.ffn_dim,
        dropout=config.dropout, max_len=config.max_len,
    )


SPEC = ModelSpec(
    name="sasrec",
    description="SASRec: causal self-attention over the basket sequence (Kang & McAuley 2018)",
    config_cls=SASRecConfig,
    build=build,
    batches=batches,
)

__all__ = ["SPEC", "SASRec", "SASRecConfig"]
