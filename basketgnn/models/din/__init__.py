"""DIN for baskets: target attention of every catalogue item over the history (docs/models.md)."""

from __future__ import annotations

from basketgnn.engine.spec import ModelSpec
from basketgnn.models.din.config import DINConfig
from basketgnn.models.din.model import DIN
from basketgnn.models.sequential import batches


def build(n_items: int, config: DINConfig) -> DIN:
    return DIN(
        n_items, dim=config.dim, attention_hidden=config.attention_hidden, hidden=config.hidden,
        activation=config.activation, history=config.history, max_chunk_elements=config.max_chunk_elements,
    )


SPEC = ModelSpec(
    name="din",
    description="DIN: target attention of every item over the history (Zhou et al. 2018)",
    config_cls=DINConfig,
    build=build,
    batches=batches,
)

__all__ = ["SPEC", "DIN", "DINConfig"]
