"""DIN, the Deep Interest Network (Zhou et al., KDD 2018), scoring the whole catalogue.

For user u with history vectors h_1 .. h_T (pooled basket embeddings, or every history item's
embedding with ``history="items"``) and every catalogue item t with embedding E_t:

    v_u(t) = Σ_j a(h_j, t) h_j,   a = MLP([h_j, E_t, h_j - E_t, h_j ⊙ E_t])   (nn/target_attention.py,
                                                                          not softmax-normalised)
    y_t    = MLP([v_u(t), E_t])                                           (200 -> 80 -> 1, Dice or PReLU)

DIN ranks candidate ads; here every catalogue item is a candidate, so the activation unit runs
for every (user, history step, item). It runs in chunks of C catalogue items with
B · C · T · 4d <= max_chunk_elements (default 2^22); inside a chunk the unit's first layer is one
matrix product (nn/target_attention.py), so the largest tensor is [B, T, C, 36]. At inference
one chunk is alive at a time; in training autograd keeps every chunk's activations for the
backward pass, so training memory grows with the catalogue (about B · I · T · 3 · 36 numbers).

Shapes: batch.items [B, T, L], batch.basket_mask [B, T] -> scores [B, I].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from basketgnn.models.din.candidates import sample_candidates
from basketgnn.models.sequences import SequenceBatch
from basketgnn.nn.basket_pooling import MeanBasketPooling
from basketgnn.nn.target_attention import TargetAttention, chunk_size, mlp


class DIN(nn.Module):
    """Args:
    n_items: catalogue size I.
    dim, attention_hidden, hidden, activation, history, max_chunk_elements, train_negatives:
        see :class:`DINConfig` (train_negatives 0: train on the whole catalogue).
    """

    def __init__(
        self,
        n_items: int,
        dim: int,
        attention_hidden: Sequence[int],
        hidden: Sequence[int],
        activation: Literal["prelu", "dice"],
        history: Literal["baskets", "items"],
        max_chunk_elements: int,
        train_negatives: int = 0,
    ) -> None:
        super().__init__()
        if history not in ("baskets", "items"):
            raise ValueError(f"history must be baskets or items, got {history!r}")
        self.n_items, self.history_kind, self.max_chunk_elements = n_items, history, max_chunk_elements
        self.train_negatives = train_negatives
        self.candidates: torch.Tensor | None = None  # [C'] of the last sampled training forward
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.pool = MeanBasketPooling()
        self.attention = TargetAttention(dim, attention_hidden, activation)
        self.scorer = mlp([2 * dim, *hidden, 1], activation)

    def history(self, batch: SequenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """History vectors and their mask. Shapes: -> [B, T', d], [B, T'] (T' = T or T · L)."""
        vectors = self.items(batch.items)  # [B, T, L, d]
        if self.history_kind == "baskets":
            return self.pool(vectors, batch.items > 0), batch.basket_mask
        B, T, L, d = vectors.shape
        return vectors.reshape(B, T * L, d), (batch.items > 0).reshape(B, T * L)

    def score(self, h: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Scores of the targets. Shapes: h [B, T, d], mask [B, T], targets [C, d] -> [B, C]."""
        pooled, _ = self.attention(h, mask, targets)  # [B, C, d]
        # First layer of the MLP over [v, t] = W_v v + (W_t t + b): the target half once per item.
        first = self.scorer[0]
        assert isinstance(first, nn.Linear)
        w_v, w_t = first.weight.split(h.shape[2], dim=1)
        hidden = pooled @ w_v.T + (targets @ w_t.T + first.bias).unsqueeze(0)  # [B, C, k]
        return self.scorer[1:](hidden).squeeze(-1)

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        """Scores [B, I]; in training with ``train_negatives`` > 0, [B, C'] of ``self.candidates``."""
        h, mask = self.history(batch)
        B, T, d = h.shape
        targets = self.items.weight[1:]  # [I, d]
        self.candidates = None
        if self.training and self.train_negatives > 0 and batch.target_items is not None:
            candidates = sample_candidates(batch.target_items, self.n_items, self.train_negatives)  # [C']
            if len(candidates) < self.n_items:
                self.candidates = candidates
                targets = targets[candidates]  # [C', d]
        C = chunk_size(B, T, d, self.max_chunk_elements)
        n = len(targets)
        return torch.cat([self.score(h, mask, targets[s : s + C]) for s in range(0, n, C)], dim=1)
