"""SASRec (Kang & McAuley, ICDM 2018) over baskets.

    b_t   = mean_{i ∈ S_t} E_i                         basket embedding (nn/basket_pooling.py)
    X^0_t = Dropout(b_t + P_t)                         learned positions P [max_len, d]
    X^l   = Block_l(X^{l-1})                           causal, pre-LayerNorm (nn/transformer_block.py)
    F     = LN(X^L)
    y_i   = F_{T_u} · E_i                              every catalogue item, shared embeddings E

T_u is the user's last real step. Step t only reads steps <= t, so no output depends on a later
basket (the paper's causality), and padding after the history is never read.

Options: ``basket_encoder="attention"`` computes b_t with a Transformer block among the basket's
items before the mean (models/basket_attention.py: the hierarchical encoder); ``interests`` K > 1
scores y_i = max_k v_{T_u,k} · E_i over K interest vectors read causally from F_{<= T_u}
(models/multi_interest.py). With ``keep_step_vectors`` (the sampled BCE objective), a training
forward keeps every step's vectors [B, T, K, d] in ``step_vectors`` for the loss.

Shapes: batch.items [B, T, L] (item + 1, 0 = padding), batch.basket_mask [B, T],
batch.lengths [B] -> scores [B, I].
"""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.models.basket_attention import BasketSelfAttention
from basketgnn.models.multi_interest import MultiInterestReadout, max_over_interests
from basketgnn.models.sequences import SequenceBatch
from basketgnn.nn.basket_pooling import MeanBasketPooling
from basketgnn.nn.transformer_block import TransformerBlock, attention_mask


class SASRec(nn.Module):
    """Args:
    n_items: catalogue size I.
    dim, blocks, heads, ffn_dim, dropout, max_len, basket_encoder, interests: see :class:`SASRecConfig`.
    keep_step_vectors: keep every step's vectors of a training forward (for a loss over all steps).
    """

    def __init__(
        self, n_items: int, dim: int, blocks: int, heads: int, ffn_dim: int, dropout: float, max_len: int,
        basket_encoder: str = "mean", interests: int = 1, keep_step_vectors: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        self.n_items, self.max_len, self.keep_step_vectors = n_items, max_len, keep_step_vectors
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.positions = nn.Embedding(max_len, dim)
        self.pool: nn.Module = MeanBasketPooling()
        if basket_encoder == "attention":
            self.pool = BasketSelfAttention(dim, heads, ffn_dim, dropout, norm_first=True, activation="relu")
        elif basket_encoder != "mean":
            raise ValueError(f"basket_encoder must be mean or attention, got {basket_encoder!r}")
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, ffn_dim, dropout, causal=True, norm_first=True, activation="relu")
            for _ in range(blocks)
        )
        self.norm = nn.LayerNorm(dim)
        self.readout = MultiInterestReadout(dim, interests) if interests > 1 else None
        self.step_vectors: torch.Tensor | None = None

    def states(self, items: torch.Tensor, basket_mask: torch.Tensor) -> torch.Tensor:
        """Every step's output F_t. Shapes: items [B, T, L], basket_mask [B, T] -> [B, T, d]."""
        T = items.shape[1]
        x = self.pool(self.items(items), items > 0)  # [B, T, d]
        x = self.dropout(x + self.positions.weight[:T])
        for block in self.blocks:
            x = block(x, basket_mask)
        return self.norm(x)

    def vectors(self, states: torch.Tensor, basket_mask: torch.Tensor, steps: torch.Tensor | None) -> torch.Tensor:
        """The scoring vectors of the steps ``steps`` [B] (one per row), or of every step (None).

        Shapes: states [B, T, d], basket_mask [B, T] -> [B, Tq, K, d] (Tq = 1 or T; K = 1
        without the multi-interest readout).
        """
        rows = torch.arange(len(states), device=states.device)
        queries = states if steps is None else states[rows, steps].unsqueeze(1)  # [B, Tq, d]
        if self.readout is None:
            return queries.unsqueeze(2)
        allowed = attention_mask(basket_mask, causal=True)[:, 0]  # [B, T, T]: s <= t, s real
        if steps is not None:
            allowed = allowed[rows, steps].unsqueeze(1)  # [B, 1, T]
        return self.readout(states, queries, allowed)

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        f = self.states(batch.items, batch.basket_mask)  # [B, T, d]
        self.step_vectors = None
        if self.training and self.keep_step_vectors:
            every = self.vectors(f, batch.basket_mask, None)  # [B, T, K, d]
            self.step_vectors = every
            last = every[torch.arange(len(f), device=f.device), batch.lengths - 1]  # [B, K, d]
        else:
            last = self.vectors(f, batch.basket_mask, batch.lengths - 1)[:, 0]  # [B, K, d]
        return max_over_interests(last, self.items.weight[1:])  # [B, I]
