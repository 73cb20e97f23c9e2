"""BERT4Rec (Sun et al., CIKM 2019) over baskets, trained with the Cloze task.

Input: the history's steps followed by one mask step (position T_u, after the last basket).

    b_t   = mean_{i ∈ S_t} E_i, or the learned mask vector m if step t is masked
    X^0_t = Dropout(LN(b_t + P_t))                       learned positions P [max_len + 1, d]
    X^l   = Block_l(X^{l-1})                             bidirectional, post-LayerNorm, GELU
    y_t   = GELU(X^L_t W + b) E^T + β                    scores of all I items at step t

Inference: the scores of the appended mask step, y_{T_u}, predict the next basket.

Training (Cloze): besides the appended mask step, every real history basket is masked with
probability ``mask_prob``; each masked basket is replaced by m as a whole, so none of its items
is visible to any position, and its items are the multi-label target of y_t at that step. The
appended step's target is the instance's next basket. The loss is the mean over all masked
steps of the multi-label loss (see ``loss`` in ``__init__.py``).

The draws use torch's default generator on the batch's device, the one that dropout uses, so a
seeded engine that restores torch's generator state on resume repeats them exactly.

Shapes: batch.items [B, T, L], batch.basket_mask [B, T], batch.lengths [B] -> scores [B, I].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from basketgnn.models.sequences import SequenceBatch
from basketgnn.nn.basket_pooling import MeanBasketPooling
from basketgnn.nn.masks import length_mask
from basketgnn.nn.transformer_block import TransformerBlock


@dataclass(frozen=True)
class ClozeOutput:
    """The masked history steps of the last training forward.

    Shapes: logits [M, I] (scores at every masked history step), targets [M, I] (multi-hot of
    the masked baskets' items), masked [B, T + 1] bool (which steps were replaced by m,
    the appended step included).
    """

    logits: torch.Tensor
    targets: torch.Tensor
    masked: torch.Tensor


class BERT4Rec(nn.Module):
    """Args:
    n_items: catalogue size I.
    dim, blocks, heads, ffn_dim, dropout, max_len, mask_prob: see :class:`BERT4RecConfig`.
    """

    def __init__(
        self,
        n_items: int,
        dim: int,
        blocks: int,
        heads: int,
        ffn_dim: int,
        dropout: float,
        max_len: int,
        mask_prob: float,
    ) -> None:
        super().__init__()
        self.n_items, self.max_len, self.mask_prob = n_items, max_len, mask_prob
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.mask_vector = nn.Parameter(torch.randn(dim))  # N(0, 1), like the item embeddings
        self.positions = nn.Embedding(max_len + 1, dim)
        self.pool = MeanBasketPooling()
        self.input_norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, ffn_dim, dropout, causal=False, norm_first=False, activation="gelu")
            for _ in range(blocks)
        )
        self.head = nn.Linear(dim, dim)
        self.item_bias = nn.Parameter(torch.zeros(n_items))
        self.cloze: ClozeOutput | None = None

    def encode(self, items: torch.Tensor, step_mask: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """Final states of every step; masked steps read m instead of their items.

        Shapes: items [B, T, L], step_mask [B, T] (True = real step), masked [B, T] -> [B, T, d].
        """
        T = items.shape[1]
        b = self.pool(self.items(items), items > 0)  # [B, T, d]
        b = torch.where(masked.unsqueeze(-1), self.mask_vector.to(b.dtype), b)
        x = self.dropout(self.input_norm(b + self.positions.weight[:T]))
        for block in self.blocks:
            x = block(x, step_mask)
        return x

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """Shapes: states [..., d] -> [..., I]."""
        return F.gelu(self.head(states)) @ self.items.weight[1:].T + self.item_bias

    def draw_mask(self, basket_mask: torch.Tensor) -> torch.Tensor:
        """Cloze draw: each real step masked with probability mask_prob. Shapes: [B, T] -> [B, T]."""
        return (torch.rand(basket_mask.shape, device=basket_mask.device) < self.mask_prob) & basket_mask

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        B, T, _ = batch.items.shape
        rows = torch.arange(B, device=batch.items.device)
        items = F.pad(batch.items, (0, 0, 0, 1))  # [B, T + 1, L]: room for the mask step
        step_mask = length_mask(batch.lengths + 1, T + 1)  # [B, T + 1]
        masked = torch.zeros_like(step_mask)
        if self.training:
            masked[:, :T] = self.draw_mask(batch.basket_mask)
        masked[rows, batch.lengths] = True  # the appended mask step (items there are all 0)
        states = self.encode(items, step_mask, masked)  # [B, T + 1, d]
        if self.training:
            history = masked.clone()
            history[rows, batch.lengths] = False
            hidden = items[history]  # [M, L]
            targets = torch.zeros(len(hidden), self.n_items + 1, dtype=states.dtype, device=states.device)
            targets.scatter_(1, hidden, 1.0)
            self.cloze = ClozeOutput(self.logits(states[history]), targets[:, 1:], masked)
        return self.logits(states[rows, batch.lengths])  # [B, I]
