"""The hierarchical encoder's lower level: self-attention among the items of each basket, then
their mean, as the basket's vector (the upper level is the model's attention across baskets).

    Z_t = Block(E_{S_t})                  one Transformer block over basket t's item vectors,
                                          every item reads every item of its basket, no positions
    b_t = (1 / |S_t|) Σ_{i ∈ S_t} Z_{t,i}

A basket is a set, so no position enters and the vector does not depend on the order of its
items (attention without positions is permutation-equivariant, the mean invariant). Items are
read in context: a basket vector is not a plain average of independent item vectors, so
"milk with cereal" and "milk with coffee" can differ in the milk's part. Only real baskets pass
through the block (padding baskets stay 0 like the mean pooling's), and an item never reads a
padding slot, so padding changes nothing.

Shapes: vectors [B, T, L, d], slot_mask [B, T, L] bool (True = real item) -> [B, T, d].
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from basketgnn.nn.basket_pooling import MeanBasketPooling
from basketgnn.nn.transformer_block import TransformerBlock


class BasketSelfAttention(nn.Module):
    """Args:
    dim, heads, ffn_dim, dropout: the block's sizes (see :class:`TransformerBlock`).
    norm_first, activation: the block's arrangement, the same as the model's blocks across baskets.
    """

    def __init__(
        self, dim: int, heads: int, ffn_dim: int, dropout: float, norm_first: bool,
        activation: Literal["relu", "gelu"],
    ) -> None:  # fmt: skip
        super().__init__()
        self.block = TransformerBlock(dim, heads, ffn_dim, dropout, causal=False, norm_first=norm_first, activation=activation)
        self.pool = MeanBasketPooling()

    def forward(self, vectors: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
        B, T, L, d = vectors.shape
        real = slot_mask.any(dim=-1)  # [B, T]
        inside = self.block(vectors[real], slot_mask[real])  # [N, L, d], N = real baskets
        pooled = self.pool(inside, slot_mask[real])  # [N, d]
        return vectors.new_zeros(B, T, d).index_put((real.nonzero(as_tuple=True)), pooled)
