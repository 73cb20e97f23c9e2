"""Mean pooling of item vectors into one vector per basket.

    b_t = (1 / |S_t|) Σ_{i ∈ S_t} e_i        (b_t = 0 for a padding step, |S_t| = 0)

Mean rather than sum: a basket is a set, so the pooling must ignore order, and the mean keeps
the scale of b_t independent of the basket size (TaFeng baskets hold 1 to 90 items), so the
attention logits downstream do not grow with it. Max pooling would drop every item but one
per dimension, and the set transformers used by some basket models are a model of their own.

Shapes: vectors [..., L, d], slot_mask [..., L] bool (True = real item) -> [..., d].
"""

from __future__ import annotations

import torch
from torch import nn


class MeanBasketPooling(nn.Module):
    """Average of the real item vectors of every basket (no parameters)."""

    def forward(self, vectors: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
        weights = slot_mask.to(vectors.dtype)  # [..., L]
        total = (vectors * weights.unsqueeze(-1)).sum(dim=-2)  # [..., d]
        return total / weights.sum(dim=-1, keepdim=True).clamp(min=1.0)
