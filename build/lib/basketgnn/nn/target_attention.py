"""DIN's target attention: the activation unit (Zhou et al., KDD 2018, section 4.3, Fig. 2).

For a user's history vectors h_1 .. h_T and a target (candidate) item vector t:

    a(h_j, t) = MLP([h_j, t, h_j - t, h_j ⊙ t])          (a scalar, one per history step)
    v_u(t)    = Σ_{j real} a(h_j, t) · h_j

The MLP is Linear(4d, k_1), act, ..., Linear(k_m, 1), act = Dice or PReLU. As published the
weights a are NOT normalised by a softmax over j, so v_u(t) keeps the intensity of the user's
interest (a history with many steps relevant to t gives a larger vector). Padding steps get
weight 0.

Every user is paired with every target, so the MLP runs on [B, C, T, ·]; callers scoring the
whole catalogue pass it in chunks of targets (see :func:`chunk_size`). The first layer is one
matrix product per chunk (see :meth:`TargetAttention.weights`); the dense concatenation is the
reference in tests/support/reference_zoo.py.

Shapes: history [B, T, d], mask [B, T] bool (True = real), targets [C, d]
-> pooled [B, C, d], weights [B, C, T].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from basketgnn.nn.dice import Dice, PReLU


def activation_layer(name: Literal["dice", "prelu"], width: int) -> nn.Module:
    """Dice (with per-feature statistics) or PReLU (one slope per feature)."""
    if name == "dice":
        return Dice(width)
    if name == "prelu":
        return PReLU(width)
    raise ValueError(f"activation must be dice or prelu, got {name!r}")


def mlp(sizes: Sequence[int], activation: Literal["dice", "prelu"]) -> nn.Sequential:
    """Linear layers sizes[0] -> sizes[1] -> ... with the activation after every hidden layer
    (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation_layer(activation, b))
    return nn.Sequential(*layers)


def chunk_size(batch: int, steps: int, dim: int, max_elements: int) -> int:
    """Targets per chunk so that one chunk's MLP input [batch, C, steps, 4 dim] holds at most
    ``max_elements`` numbers (at least one target)."""
    return max(1, max_elements // max(1, batch * steps * 4 * dim))


class TargetAttention(nn.Module):
    """Args:
    dim: size d of history and target vectors.
    hidden: hidden sizes of the activation unit's MLP (DIN's code: one layer of 36).
    activation: "dice" or "prelu".

    Shapes: see the module docstring.
    """

    def __init__(self, dim: int, hidden: Sequence[int] = (36,), activation: Literal["dice", "prelu"] = "prelu") -> None:
        super().__init__()
        self.unit = mlp([4 * dim, *hidden, 1], activation)

    def weights(self, history: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """a(h_j, t) for every user, target and step; 0 at padding. Shape [B, C, T].

        The unit's first layer is linear, so [B, C, T, 4d] is never built. With W = [W_h, W_t,
        W_d, W_p] split by input block:

            W [h, t, h - t, h ⊙ t] + b = (W_h + W_d + W_p diag(t)) h + ((W_t - W_d) t + b)

        i.e. one matrix M_t [k, d] per target, and all (user-step, target) pairs are a single
        matrix product [B·T, d] x [d, C·k] (the bias added inside it).

        With one hidden layer and PReLU (DIN's unit, the default), the output layer w is folded
        into the activation: PReLU(z) = α ⊙ z + (1 - α) ⊙ relu(z), so

            a = w · PReLU(z) + b_2 = relu(z) · (w ⊙ (1 - α)) + (w ⊙ α) · (M_t h + c_t) + b_2,

        and the linear half is a product [B·T, d] x [d, C]: the [B, T, C, k] tensor goes
        through one relu and one matrix-vector product instead of PReLU's select and a
        Linear(k, 1). Exact; tests/support/reference_zoo.py's dense unit is the reference.
        """
        B, T, d = history.shape
        C = targets.shape[0]
        first = self.unit[0]
        assert isinstance(first, nn.Linear)
        w_h, w_t, w_d, w_p = first.weight.split(d, dim=1)  # [k, d] each
        k = first.out_features
        per_target = (w_h + w_d).unsqueeze(0) + w_p.unsqueeze(0) * targets.unsqueeze(1)  # [C, k, d]
        target_bias = targets @ (w_t - w_d).T + first.bias  # [C, k]
        flat = history.reshape(B * T, d)
        hidden = torch.addmm(target_bias.reshape(C * k), flat, per_target.reshape(C * k, d).T).view(B, T, C, k)
        if len(self.unit) == 3 and isinstance(self.unit[1], PReLU):
            alpha, last = self.unit[1].alpha, self.unit[2]
            assert isinstance(last, nn.Linear)
            w = last.weight[0]  # [k]
            u = w * alpha  # the linear half's weights [k]
            linear_half = (flat @ (per_target.transpose(1, 2) @ u).T).view(B, T, C)  # [B, T, C]
            linear_half = linear_half + (target_bias @ u + last.bias)  # + [C]
            a = (torch.relu(hidden) @ (w - u)).add_(linear_half).transpose(1, 2)  # [B, C, T]
        else:
            a = self.unit[1:](hidden).squeeze(-1).transpose(1, 2)  # [B, C, T]
        return a * mask.unsqueeze(1).to(a.dtype)

    def forward(
        self, history: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.weights(history, mask, targets)  # [B, C, T]
        return torch.einsum("bct,btd->bcd", a, history), a


def pad_segments(values: torch.Tensor, segment: torch.Tensor, n_segments: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Group rows by segment into a left-aligned padded tensor (rows keep their order).

    Example: segment [1, 0, 1], n_segments 2 -> row 1 at [0, 0]; rows 0 and 2 at [1, 0], [1, 1].

    Shapes: values [M, d], segment [M] -> padded [n_segments, N, d] (N = largest segment),
    mask [n_segments, N] bool (True = real row).
    """
    M = len(segment)
    counts = torch.bincount(segment, minlength=n_segments)  # [n]
    order = torch.argsort(segment, stable=True)  # rows by segment, original order kept inside
    starts = counts.cumsum(0) - counts  # [n]
    pos = torch.empty_like(segment)
    pos[order] = torch.arange(M, device=segment.device) - starts[segment[order]]
    N = int(counts.max()) if M else 0
    padded = values.new_zeros(n_segments, N, values.shape[1]).index_put((segment, pos), values)
    mask = torch.zeros(n_segments, N, dtype=torch.bool, device=values.device)
    mask[segment, pos] = True
    return padded, mask
