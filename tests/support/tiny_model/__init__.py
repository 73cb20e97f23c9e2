"""A tiny neural model, registered only by the tests (tests/test_adding_a_model.py): a whole model
package in one file, to show that adding a model is one folder.

    e_u = mean_{i ∈ S_T} E_i            mean embedding of the customer's last history basket
    y_i = e_u · E_i + b_i               every catalogue item, shared embeddings E

Shapes: batch.items [B, 1, L] (item + 1, 0 = padding), batch.lengths [B] -> scores [B, I].
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.models.options import TrainOptions
from basketgnn.models.sequences import SequenceBatch, SequenceSource, sequence_batches
from basketgnn.models.spec import ModelSpec


class TinyConfig(TrainOptions):
    """The engine's training options plus the embedding size."""

    dim: int = Field(8, ge=1, description="Item embedding size.")


class Tiny(nn.Module):
    def __init__(self, n_items: int, dim: int) -> None:
        super().__init__()
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.bias = nn.Parameter(torch.zeros(n_items))

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        last = batch.items[:, -1]  # [B, L]: the batches hold the last history basket only
        mask = (last > 0).unsqueeze(-1).float()  # [B, L, 1]
        e_u = (self.items(last) * mask).sum(1) / mask.sum(1).clamp(min=1)  # [B, d]
        return e_u @ self.items.weight[1:].T + self.bias  # [B, I]


def batches(
    data: BasketData, instances: Instances, config: TinyConfig, with_targets: bool
) -> SequenceSource:
    """Each instance as a sequence of one step: its last history basket."""
    return sequence_batches(data, instances, max_len=1)


SPEC = ModelSpec(
    name="tiny",
    description="a tiny test model",
    config_cls=TinyConfig,
    build=lambda n_items, config: Tiny(n_items, config.dim),
    batches=batches,
)
