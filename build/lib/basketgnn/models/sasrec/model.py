"""SASRec (Kang & McAuley, ICDM 2018) over baskets.

    b_t   = mean_{i ∈ S_t} E_i                         basket embedding (nn/basket_pooling.py)
    X^0_t = Dropout(b_t + P_t)                         learned positions P [max_len, d]
    X^l   = Block_l(X^{l-1})                           causal, pre-LayerNorm (nn/transformer_block.py)
    F     = LN(X^L)
    y_i   = F_{T_u} · E_i                              every catalogue item, shared embeddings E

T_u is the user's last real step. Step t only reads steps <= t, so no output depends on a later
basket (the paper's causality), and padding after the history is never read.

Shapes: batch.items [B, T, L] (item + 1, 0 = padding), batch.basket_mask [B, T],
batch.lengths [B] -> scores [B, I].
"""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.models.sequences import SequenceBatch
from basketgnn.nn.basket_pooling import MeanBasketPooling
from basketgnn.nn.transformer_block import TransformerBlock


class SASRec(nn.Module):
    """Args:
    n_items: catalogue size I.
    dim, blocks, heads, ffn_dim, dropout, max_len: see :class:`SASRecConfig`.
    """

    def __init__(
        self, n_items: int, dim: int, blocks: int, heads: int, ffn_dim: int, dropout: float, max_len: int
    ) -> None:
        super().__init__()
        self.n_items, self.max_len = n_items, max_len
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.positions = nn.Embedding(max_len, dim)
        self.pool = MeanBasketPooling()
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, ffn_dim, dropout, causal=True, norm_first=True, activation="relu")
            for _ in range(blocks)
        )
        self.norm = nn.LayerNorm(dim)

    def states(self, items: torch.Tensor, basket_mask: torch.Tensor) -> torch.Tensor:
        """Every step's output F_t. Shapes: items [B, T, L], basket_mask [B, T] -> [B, T, d]."""
        T = items.shape[1]
        x = self.pool(self.items(items), items > 0)  # [B, T, d]
        x = self.dropout(x + self.positions.weight[:T])
        for block in self.blocks:
            x = block(x, basket_mask)
        return self.norm(x)

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        f = self.states(batch.items, batch.basket_mask)  # [B, T, d]
        last = f[torch.arange(len(f), device=f.device), batch.lengths - 1]  # [B, d]
        return last @ self.items.weight[1:].T  # [B, I]
