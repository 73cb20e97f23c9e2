"""DIN for baskets: target attention of every catalogue item over the history (docs/models.md)."""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.models.din.config import DINConfig
from basketgnn.models.din.model import DIN
from basketgnn.models.sequences import SequenceBatch
from basketgnn.models.sequential import batches
from basketgnn.models.spec import ModelSpec
from basketgnn.nn.losses import compute_loss, multi_hot


def build(n_items: int, config: DINConfig) -> DIN:
    return DIN(
        n_items, dim=config.dim, attention_hidden=config.attention_hidden, hidden=config.hidden,
        activation=config.activation, history=config.history, max_chunk_elements=config.max_chunk_elements,
        train_negatives=config.train_negatives,
    )


def candidate_loss(module: nn.Module, batch: SequenceBatch, scores: torch.Tensor, config: DINConfig) -> torch.Tensor:
    """The multi-label loss (``config.loss``) over the columns the forward scored: the whole
    catalogue, or the sampled candidates (``train_negatives``), whose target columns are the
    multi-hot targets restricted to them. Shapes: scores [B, I] or [B, C']."""
    model = getattr(module, "module", module)  # unwrap DistributedDataParallel
    if batch.target_items is None or batch.target_offsets is None:
        raise ValueError("DIN's loss needs a batch collated with targets")
    y = multi_hot(batch.target_items, batch.target_offsets, model.n_items).to(scores.dtype)  # [B, I]
    candidates, model.candidates = model.candidates, None  # one forward, one loss
    if candidates is not None:
        y = y[:, candidates]  # [B, C']
    return compute_loss(config.loss, scores, y)


#: ``basketgnn train --model din --preset paper``: the published network (Zhou et al. 2018, Fig. 2
#: and section 6): embeddings of size 12, the activation unit's hidden layer 36, the scoring MLP
#: 200-80 with Dice, attention over every behaviour (each history item, not pooled baskets), 32
#: samples a batch (their public-data setting), no fusion. Their optimiser (SGD, lr 1 decayed by
#: 0.1) and mini-batch aware regularisation are not options of the engine: Adam keeps the
#: default learning rate.
PAPER = {
    "dim": 12, "attention_hidden": [36], "hidden": [200, 80], "activation": "dice", "history": "items",
    "batch_size": 32, "fusion": "off",
}  # fmt: skip


SPEC = ModelSpec(
    name="din",
    description="DIN: target attention of every item over the history (Zhou et al. 2018)",
    config_cls=DINConfig,
    build=build,
    batches=batches,
    loss=candidate_loss,
    presets={"paper": PAPER},
)

__all__ = ["SPEC", "DIN", "DINConfig", "candidate_loss"]
