"""The factored weighted sum of the GCN (``weighted_gcn.weighted_sum``) compiled (numba), on
the CPU: the same additions in the same order as the tensor path's two ``index_add`` passes,
without their gathered [F, C] copies; for inference (:func:`weighted_sum`) and, with its
gradient by the same kernel, for training (:func:`weighted_sum_trainable`).

    slots[s] = Σ_{q: slot q = s} x[row q]                   (q in entry order)
    agg[r]   = (Σ_{q: row q = r} slots[slot q] + self_r · x[r]) · scale_r

Shapes: R rows, C features, F entries of B, S slots.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import torch

from basketgnn.jit import DEFAULT_WIDTH, jit_options

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def factored_sum(x, pair_row, pair_slot, num_slots, row_self, row_scale):  # pragma: no cover - jit
    """Shapes: x [R, C]; pair_row, pair_slot [F]; row_self, row_scale [R] (x's dtype) -> [R, C]."""
    if x.shape[1] == DEFAULT_WIDTH:  # a constant: the loops over the features unroll
        return _factored_sum(x, pair_row, pair_slot, num_slots, row_self, row_scale, DEFAULT_WIDTH)
    return _factored_sum(x, pair_row, pair_slot, num_slots, row_self, row_scale, x.shape[1])


@numba.njit(**_JIT, inline="always")
def _factored_sum(x, pair_row, pair_slot, num_slots, row_self, row_scale, C):  # pragma: no cover - jit
    """:func:`factored_sum` with C = x.shape[1] as an argument (inlined, so a constant C reaches the loops)."""
    R = x.shape[0]
    slots = np.zeros((num_slots, C), x.dtype)
    for q in range(len(pair_row)):
        s, r = pair_slot[q], pair_row[q]
        for c in range(C):
            slots[s, c] += x[r, c]
    back = np.zeros((R, C), x.dtype)
    for q in range(len(pair_row)):
        s, r = pair_slot[q], pair_row[q]
        for c in range(C):
            back[r, c] += slots[s, c]
    for r in range(R):
        for c in range(C):
            back[r, c] = (back[r, c] + row_self[r] * x[r, c]) * row_scale[r]
    return back


def weighted_sum(x: torch.Tensor, pair_row: torch.Tensor, pair_slot: torch.Tensor, num_slots: int,
                 row_self: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """:func:`factored_sum` on CPU tensors. Shapes: x [R, C] -> [R, C]."""
    out = factored_sum(
        x.detach().contiguous().numpy(), pair_row.numpy(), pair_slot.numpy(), num_slots,
        row_self.to(x.dtype).numpy(), row_scale.to(x.dtype).numpy(),
    )  # fmt: skip
    return torch.from_numpy(out)


class _WeightedSum(torch.autograd.Function):
    """:func:`factored_sum` as an autograd function of x, for training. The sum is linear,
    agg = S (B Bᵀ + diag(self)) x with S = diag(scale), and B Bᵀ + diag(self) is symmetric, so
    the gradient is the same kernel on scale · grad with scale 1:
    dx = (B Bᵀ + diag(self)) S grad."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, pair_row: torch.Tensor, pair_slot: torch.Tensor, num_slots: int,
                row_self: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
        ctx.plan = (pair_row, pair_slot, num_slots, row_self, row_scale)
        return weighted_sum(x, pair_row, pair_slot, num_slots, row_self, row_scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        pair_row, pair_slot, num_slots, row_self, row_scale = ctx.plan
        scaled = grad * row_scale.to(grad.dtype).unsqueeze(1)  # [R, C]
        dx = weighted_sum(scaled, pair_row, pair_slot, num_slots, row_self, torch.ones_like(row_scale))
        return dx, None, None, None, None, None


def weighted_sum_trainable(x: torch.Tensor, pair_row: torch.Tensor, pair_slot: torch.Tensor, num_slots: int,
                           row_self: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """:func:`weighted_sum` differentiable in x (CPU tensors). Shapes: x [R, C] -> [R, C]."""
    return _WeightedSum.apply(x, pair_row, pair_slot, num_slots, row_self, row_scale)
