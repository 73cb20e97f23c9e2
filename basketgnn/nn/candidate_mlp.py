"""A small network scoring each candidate item from its features, and the listwise loss that trains it.

    s_{u,j} = w_3 · relu(W_2 · relu(W_1 · (x_{u,j} − μ) / σ + b_1) + b_2) + b_3

for candidate j of customer u with features x_{u,j} (standardised by the training features'
mean μ and standard deviation σ, stored as buffers so a saved network carries them).

The loss is the cross-entropy between the softmax of a customer's candidate scores and its
target basket spread evenly over the candidates it holds:

    L_u = −(1 / |T_u ∩ C_u|) Σ_{j ∈ T_u ∩ C_u} log softmax_j(s_u)

so the network learns the order of each customer's candidates, not a calibrated probability.

Shapes: x [n, C, F] -> scores [n, C]; labels [n, C] (1 = in the target basket).
"""

from __future__ import annotations

import torch
from torch import nn


class CandidateMLP(nn.Module):
    """Scores [n, C] of candidates with features [n, C, n_features] (module docstring)."""

    def __init__(self, n_features: int, hidden: int = 64) -> None:
        super().__init__()
        self.hidden = hidden
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        self.layers = nn.Sequential(
            nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def standardise_with(self, x: torch.Tensor) -> None:
        """Set μ and σ from training features x [..., F] (σ of a constant feature: 1)."""
        flat = x.reshape(-1, x.shape[-1]).double()
        self.mean.copy_(flat.mean(0).to(self.mean.dtype))
        std = flat.std(0)
        self.std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)).to(self.std.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers((x - self.mean) / self.std).squeeze(-1)  # [n, C]

    def score_rows(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward`'s values of candidate rows x [m, F] -> [m], without autograd: the
        same operations on the same values, the division and the ReLUs done in place on the
        block's own temporaries (ranking's hot path: fewer passes over fresh memory)."""
        h = x - self.mean  # [m, F], a new tensor: x is not written
        h.div_(self.std)
        for layer in self.layers:
            h = h.relu_() if isinstance(layer, nn.ReLU) else layer(h)
        return h.squeeze(-1)


def listwise_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean over customers with a target among their candidates of L_u (module docstring).
    Shapes: scores, labels [n, C] -> scalar."""
    hits = labels.sum(1)  # [n]
    keep = hits > 0
    log_p = torch.log_softmax(scores[keep], dim=1)  # [n', C]
    return -((labels[keep] * log_p).sum(1) / hits[keep]).mean()
