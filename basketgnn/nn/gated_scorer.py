"""Gated information fusing and scoring over the whole catalogue (MODEL.md §3).

    ê_i = (1 - α_i) E_i + α_i z_{u,i}   for i in V_u,     ê_i = E_i otherwise
    y_i = w_o . ê_i + b_o

Because the scorer is linear this equals a base score shared by the batch plus a correction on
each user's own nodes, so no [batch, items, d] tensor is ever built:

    y_i = (w_o . E_i + b_o) + [i in V_u] α_i (w_o . z_{u,i} - w_o . E_i)
"""

from __future__ import annotations

import torch
from torch import nn


class GatedScorer(nn.Module):
    """Scores every catalogue item for every user of the batch.

    Args:
        num_items: catalogue size I.
        dim: embedding size d.
        gate: "learned" (α ∈ R^I, initialised U[0, 1]), "fixed" (α = 0.5 for every item) or
            "off" (α = 1: a user's own items are scored from z alone).

    Shapes: embedding E [I, d]; z [M, d] per user-node; node_item [M]; node_user [M]
    -> scores [B, I].
    """

    def __init__(self, num_items: int, dim: int, gate: str = "learned") -> None:
        super().__init__()
        if gate not in ("learned", "fixed", "off"):
            raise ValueError(f"unknown gate {gate!r}")
        self.gate = gate
        self.alpha = nn.Parameter(torch.rand(num_items)) if gate == "learned" else None
        self.out = nn.Linear(dim, 1)

    def gate_values(self, node_item: torch.Tensor) -> torch.Tensor:
        """α of each node's item. Shapes: [M] -> [M]."""
        if self.alpha is not None:
            return self.alpha[node_item]
        value = 0.5 if self.gate == "fixed" else 1.0
        return torch.full(node_item.shape, value, device=node_item.device)

    def forward(
        self,
        embedding: torch.Tensor,
        z: torch.Tensor,
        node_item: torch.Tensor,
        node_user: torch.Tensor,
        batch_size: int,
    ) -> torch.Tensor:
        w_o = self.out.weight.squeeze(0)  # [d]
        base = embedding @ w_o + self.out.bias  # [I]
        correction = self.gate_values(node_item) * (z @ w_o - base[node_item] + self.out.bias)
        scores = base.expand(batch_size, -1).clone()  # [B, I]
        scores.index_put_((node_user, node_item), correction, accumulate=True)
        return scores
