"""BERT4Rec for baskets: bidirectional self-attention trained with the Cloze task (docs/models.md)."""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.models.bert4rec.config import BERT4RecConfig
from basketgnn.models.bert4rec.model import BERT4Rec, ClozeOutput
from basketgnn.models.sequences import SequenceBatch
from basketgnn.models.sequential import batches
from basketgnn.models.spec import ModelSpec
from basketgnn.nn.losses import compute_loss, multi_hot


def build(n_items: int, config: BERT4RecConfig) -> BERT4Rec:
    return BERT4Rec(
        n_items, dim=config.dim, blocks=config.blocks, heads=config.heads, ffn_dim=config.ffn_dim,
        dropout=config.dropout, max_len=config.max_len, mask_prob=config.mask_prob,
    )


def cloze_loss(module: nn.Module, batch: SequenceBatch, scores: torch.Tensor, config: BERT4RecConfig) -> torch.Tensor:
    """The multi-label loss (``config.loss``) averaged over every masked step of the batch: the
    appended step (``scores``, target = the next basket) and the masked history baskets (read
    from the training forward that produced ``scores``)."""
    model = getattr(module, "module", module)  # unwrap DistributedDataParallel
    if batch.target_items is None or batch.target_offsets is None:
        raise ValueError("the Cloze loss needs a batch collated with targets")
    y = multi_hot(batch.target_items, batch.target_offsets, scores.shape[1]).to(scores.dtype)
    cloze: ClozeOutput | None = model.cloze
    model.cloze = None  # one forward, one loss; do not keep the graph alive
    if cloze is not None and len(cloze.logits):
        scores, y = torch.cat([scores, cloze.logits]), torch.cat([y, cloze.targets])
    return compute_loss(config.loss, scores, y)


SPEC = ModelSpec(
    name="bert4rec",
    description="BERT4Rec: bidirectional self-attention with Cloze training (Sun et al. 2019)",
    config_cls=BERT4RecConfig,
    build=build,
    batches=batches,
    loss=cloze_loss,
)

__all__ = ["SPEC", "BERT4Rec", "BERT4RecConfig", "cloze_loss"]
