"""Dice, the data-adaptive activation of DIN, and PReLU over the last dimension;
Dice is DIN's own activation (Zhou et al., KDD 2018, section 4.3).

    p(s) = sigmoid((s - E[s]) / sqrt(Var[s] + eps)),     f(s) = p(s) · s + (1 - p(s)) · α · s

with E[s], Var[s] per feature over the mini-batch in training and their moving averages at
inference (batch normalisation without affine parameters), and α a learned per-feature slope
(initialised to 0, so Dice starts as a smoothed ReLU). PReLU is Dice with p a hard step at 0.

Shapes: x [..., num_features] -> same shape (statistics over every leading dimension).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Dice(nn.Module):
    """Args:
    num_features: size of the last dimension.
    eps: added to the variance (1e-8 in the paper).
    momentum: weight of the current batch in the moving averages.
    """

    def __init__(self, num_features: int, eps: float = 1e-8, momentum: float = 0.1) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.alpha = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [N, F]
        normed = F.batch_norm(
            flat, self.running_mean, self.running_var, training=self.training,
            momentum=self.momentum, eps=self.eps,
        ).view_as(x)
        p = torch.sigmoid(normed)
        return p * x + (1 - p) * self.alpha * x


class PReLU(nn.Module):
    """PReLU over the last dimension, one learned slope per feature (DIN's other activation):
    f(s) = s if s > 0 else α · s, α initialised to 0.25. torch's nn.PReLU puts the features on
    dimension 1, which is not where they are in DIN's [B, C, T, k] tensors.

    Shapes: x [..., num_features] -> same shape.
    """

    def __init__(self, num_features: int, init: float = 0.25) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((num_features,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's fused PReLU kernel puts the features on dimension 1: a [N, F] view is exactly
        # that. Same numbers as torch.where(x > 0, x, α x) in one pass over the tensor, not a
        # product, a comparison and a select (DIN's [B, T, C, 36] tensors, forward + backward).
        return F.prelu(x.reshape(-1, x.shape[-1]), self.alpha).view(x.shape)
