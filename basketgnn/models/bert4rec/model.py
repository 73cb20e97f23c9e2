"""BERT4Rec (Sun et al., CIKM 2019) over baskets, trained with the Cloze task.

Input: the history's steps followed by one mask step (position T_u, after the last basket).

    b_t   = mean_{i ∈ S_t} E_i, or the learned mask vector m if step t is masked
    X^0_t = Dropout(LN(b_t + P_t))                       learned positions P [max_len + 1, d]
    X^l   = Block_l(X^{l-1})                             bidirectional, post-LayerNorm, GELU
    y_t   = GELU(X^L_t W + b) E^T + β                    scores of all I items at step t

Inference: the scores of the appended mask step, y_{T_u}, predict the next basket.

Options: ``basket_encoder="attention"`` computes b_t with a Transformer block among the basket's
items before the mean (models/basket_attention.py: the hierarchical encoder); ``interests`` K > 1
replaces X^L_t in y_t by K interest vectors read from every real step's X^L (the appended step
included), y_{t,i} = max_k GELU(v_{t,k} W + b) · E_i + β_i (models/multi_interest.py).

Training (Cloze): besides the appended mask step, every real history basket is masked with
probability ``mask_prob``; each masked basket is replaced by m as a whole, so none of its items
is visible to any position, and its items are the multi-label target of y_t at that step. The
appended step's target is the instance's next basket. The loss is the mean over all masked
steps of the training loss (see ``cloze_loss`` in ``__init__.py``).

The draws use torch's default generator on the batch's device, the one that dropout uses, so a
seeded engine that restores torch's generator state on resume repeats them exactly.

Shapes: batch.items [B, T, L], batch.basket_mask [B, T], batch.lengths [B] -> scores [B, I].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from basketgnn.models.basket_attention import BasketSelfAttention
from basketgnn.models.multi_interest import MultiInterestReadout, max_over_interests
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
    dim, blocks, heads, ffn_dim, dropout, max_len, mask_prob, basket_encoder, interests: see
        :class:`BERT4RecConfig`.
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
        basket_encoder: str = "mean",
        interests: int = 1,
    ) -> None:
        super().__init__()
        self.n_items, self.max_len, self.mask_prob = n_items, max_len, mask_prob
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.mask_vector = nn.Parameter(torch.randn(dim))  # N(0, 1), like the item embeddings
        self.positions = nn.Embedding(max_len + 1, dim)
        self.pool: nn.Module = MeanBasketPooling()
        if basket_encoder == "attention":
            self.pool = BasketSelfAttention(dim, heads, ffn_dim, dropout, norm_first=False, activation="gelu")
        elif basket_encoder != "mean":
            raise ValueError(f"basket_encoder must be mean or attention, got {basket_encoder!r}")
        self.input_norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, ffn_dim, dropout, causal=False, norm_first=False, activation="gelu")
            for _ in range(blocks)
        )
        self.head = nn.Linear(dim, dim)
        self.item_bias = nn.Parameter(torch.zeros(n_items))
        self.readout = MultiInterestReadout(dim, interests) if interests > 1 else None
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

    def logits_at(self, states: torch.Tensor, step_mask: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The logits of the chosen steps, through the multi-interest readout when there is one.

        Shapes: states [B, T, d], step_mask [B, T], chosen [B, T] bool (M True) -> [M, I].
        """
        if self.readout is None:
            return self.logits(states[chosen])
        T = states.shape[1]
        allowed = step_mask.unsqueeze(1).expand(-1, T, -1)  # [B, T, T]: every real step
        vectors = self.readout(states, states, allowed)[chosen]  # [M, K, d]
        return max_over_interests(F.gelu(self.head(vectors)), self.items.weight[1:]) + self.item_bias

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
            self.cloze = ClozeOutput(self.logits_at(states, step_mask, history), targets[:, 1:], masked)
        appended = torch.zeros_like(step_mask)
        appended[rows, batch.lengths] = True
        return self.logits_at(states, step_mask, appended)  # [B, I]
