"""The factored weighted sum of the GCN (``weighted_gcn.weighted_sum``) compiled (numba), on
the CPU: the same additions in the same order as the tensor path's two ``index_add`` passes,
without their gathered [F, C] copies; for inference (:func:`weighted_sum`) and, with its
gradient by the same kernel, for training (:func:`weighted_sum_trainable`).

    slots[s] = Σ_{q: slot q = s} x[row q]                   (q in entry order)
    agg[r]   = (Σ_{q: row q = r} slots[slot q] + self_r · x[r]) · scale_r

For inference, :func:`projected_sum_relu` takes the rows already projected by the layer's
linear map (which commutes with the sum) and gathered from a table, and adds the bias and the
ReLU in the same pass (``WeightedGCN.forward_gathered``).

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
    back = _pair_sums(x, np.zeros(0, np.int64), pair_row, pair_slot, num_slots, x.shape[0], C)
    for r in range(x.shape[0]):
        for c in range(C):
            back[r, c] = (back[r, c] + row_self[r] * x[r, c]) * row_scale[r]
    return back


@numba.njit(**_JIT, inline="always")
def _pair_sums(y, index, pair_row, pair_slot, num_slots, R, C):  # pragma: no cover - jit
    """Σ_{q: row q = r} slots[slot q] for the R rows, slots summed over x[row] = y[index[row]]
    (y[row] where index is empty), entries in order. Shapes: -> [R, C]."""
    gather = len(index) > 0
    slots = np.zeros((num_slots, C), y.dtype)
    for q in range(len(pair_row)):
        s, r = pair_slot[q], pair_row[q]
        i = index[r] if gather else r
        for c in range(C):
            slots[s, c] += y[i, c]
    back = np.zeros((R, C), y.dtype)
    for q in range(len(pair_row)):
        s, r = pair_slot[q], pair_row[q]
        for c in range(C):
            back[r, c] += slots[s, c]
    return back


@numba.njit(**_JIT)
def projected_sum_relu(y, index, pair_row, pair_slot, num_slots, row_self, row_scale, bias):  # pragma: no cover - jit
    """ReLU(agg[r] + bias) of :func:`factored_sum` over the rows x[r] = y[index[r]] (x = y
    where index is empty), in one pass: no [R, C] copy of the gathered rows.

    Shapes: y [K, C]; index [R] or [0]; pair_row, pair_slot [F]; row_self, row_scale [R];
    bias [C] (y's dtype) -> [R, C].
    """
    if y.shape[1] == DEFAULT_WIDTH:  # a constant: the loops over the features unroll
        return _projected_sum_relu(y, index, pair_row, pair_slot, num_slots, row_self, row_scale, bias, DEFAULT_WIDTH)
    return _projected_sum_relu(y, index, pair_row, pair_slot, num_slots, row_self, row_scale, bias, y.shape[1])


@numba.njit(**_JIT, inline="always")
def _projected_sum_relu(y, index, pair_row, pair_slot, num_slots, row_self, row_scale, bias, C):  # pragma: no cover - jit
    gather = len(index) > 0
    R = len(index) if gather else y.shape[0]
    out = _pair_sums(y, index, pair_row, pair_slot, num_slots, R, C)
    for r in range(R):
        i = index[r] if gather else r
        for c in range(C):
            v = (out[r, c] + row_self[r] * y[i, c]) * row_scale[r] + bias[c]
            out[r, c] = 0.0 if v < 0 else v  # NaN stays NaN, as in torch.relu
    return out


def weighted_sum(x: torch.Tensor, pair_row: torch.Tensor, pair_slot: torch.Tensor, num_slots: int,
                 row_self: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """:func:`factored_sum` on CPU tensors. Shapes: x [R, C] -> [R, C]."""
    out = factored_sum(
        x.detach().contiguous().numpy(), pair_row.numpy(), pair_slot.numpy(), num_slots,
        row_self.to(x.dtype).numpy(), row_scale.to(x.dtype).numpy(),
    )  # fmt: skip
    return torch.from_numpy(out)


def projected_sum(y: torch.Tensor, index: torch.Tensor | None, pair_row: torch.Tensor, pair_slot: torch.Tensor,
                  num_slots: int, row_self: torch.Tensor, row_scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """:func:`projected_sum_relu` on CPU tensors (inference: no gradient).
    Shapes: y [K, C]; index [R] or None (then R = K); bias [C] -> [R, C]."""
    empty = np.zeros(0, np.int64)
    out = projected_sum_relu(
        y.detach().contiguous().numpy(), empty if index is None else index.numpy(), pair_row.numpy(),
        pair_slot.numpy(), num_slots, row_self.to(y.dtype).numpy(), row_scale.to(y.dtype).numpy(),
        bias.detach().to(y.dtype).contiguous().numpy(),
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
