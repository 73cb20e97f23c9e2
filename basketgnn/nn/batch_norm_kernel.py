"""BatchNorm with row multiplicities in training (``weighted_gcn.MultiplicityBatchNorm1d``),
with the GCN layer's ReLU and dropout after it, compiled (numba), on the CPU: statistics,
normalisation, affine map, ReLU and dropout's mask in three passes over the rows and the
gradient in three, instead of about twenty element-wise torch operations and their autograd
records. Row r counts w_r times (n = sum_r w_r):

    mean_c  = sum_r w_r x[r, c] / n
    var_c   = sum_r w_r (x[r, c] - mean_c)^2 / n          (biased, as BatchNorm normalises)
    xhat    = (x - mean) / sqrt(var + eps);   y = xhat * gamma + beta
    out     = y · keep,   keep = [y > 0] (ReLU) · noise / (1 - p) (dropout; each factor optional)

and with g = dLoss/dout (each row read once downstream; its copies' gradients are already summed
in g[r]) and gy = g · keep = dLoss/dy:

    dbeta_c  = sum_r gy[r, c];   dgamma_c = sum_r gy[r, c] xhat[r, c]
    dx[r, c] = gamma_c / sqrt(var_c + eps) * (gy[r, c] - w_r / n * (dbeta_c + xhat[r, c] dgamma_c))

(the gradient through the mean and the variance is the w_r / n term). Sums run in float64.

Shapes: R rows, C features.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import torch
from torch.autograd.function import once_differentiable

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def forward_kernel(x, w, gamma, beta, eps, relu, noise, p, out, xhat, keep):  # pragma: no cover - jit
    """Normalised rows into ``xhat`` and ``out`` = dropout(relu(xhat * gamma + beta)) (each
    step optional); returns the batch's mean and biased variance [C] (float64), for the running
    statistics. With ReLU or dropout, ``keep`` gets d out / d(xhat * gamma + beta): 0 where
    ReLU cuts or dropout drops, else 1 / (1 - p) with dropout (p < 1) and 1 without.

    Shapes: x, out, xhat [R, C]; w [R] (x's dtype); gamma, beta [C] or empty (no affine map);
    noise [R, C] of 0 and 1 (torch's draw) or empty (no dropout); keep [R, C] or empty.
    """
    R, C = x.shape
    mean, var = np.zeros(C), np.zeros(C)
    n = 0.0
    for r in range(R):
        wr = np.float64(w[r])
        n += wr
        for c in range(C):
            mean[c] += wr * x[r, c]
    mean /= n
    for r in range(R):
        wr = np.float64(w[r])
        for c in range(C):
            d = x[r, c] - mean[c]
            var[c] += wr * d * d
    var /= n
    rstd = 1.0 / np.sqrt(var + eps)
    a, b = np.ones(C), np.zeros(C)
    if gamma.shape[0] > 0:
        a[:] = gamma
        b[:] = beta
    drop = noise.shape[0] > 0
    scale = 1.0 / (1.0 - p) if drop else 1.0
    for r in range(R):
        for c in range(C):
            h = (x[r, c] - mean[c]) * rstd[c]
            xhat[r, c] = h
            y = h * a[c] + b[c]
            k = 1.0
            if relu and y <= 0.0:
                k = 0.0
            if drop:
                k *= noise[r, c] * scale
            out[r, c] = y * k
            if relu or drop:
                keep[r, c] = k
    return mean, var


@numba.njit(**_JIT)
def backward_kernel(g, xhat, w, gamma, var, eps, keep, dx, dgamma, dbeta):  # pragma: no cover - jit
    """The gradients of :func:`forward_kernel`'s ``out`` with respect to x (into ``dx``),
    gamma and beta (into ``dgamma``, ``dbeta``, float64) from g = dLoss/dout.

    Shapes: g, xhat, dx [R, C]; w [R]; gamma [C] or empty (no affine map: gamma 1); var [C];
    keep [R, C] (the forward's) or empty (no ReLU, no dropout).
    """
    R, C = g.shape
    gated = keep.shape[0] > 0
    if gated:
        for r in range(R):
            for c in range(C):
                dx[r, c] = g[r, c] * keep[r, c]  # dLoss/d(xhat * gamma + beta), kept in dx
    else:
        dx[:] = g
    dgamma[:] = 0.0
    dbeta[:] = 0.0
    n = 0.0
    for r in range(R):
        n += w[r]
        for c in range(C):
            dbeta[c] += dx[r, c]
            dgamma[c] += dx[r, c] * xhat[r, c]
    scale = 1.0 / np.sqrt(var + eps)
    if gamma.shape[0] > 0:
        scale *= gamma
    for r in range(R):
        share = w[r] / n
        for c in range(C):
            dx[r, c] = scale[c] * (dx[r, c] - share * (dbeta[c] + xhat[r, c] * dgamma[c]))


class _WeightedBatchNorm(torch.autograd.Function):
    """:func:`forward_kernel` / :func:`backward_kernel` as an autograd function of x, gamma and
    beta. Returns (out, mean, var); mean and var carry no gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float,
                relu: bool, noise: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        xn = x.detach().contiguous().numpy()
        wn = w.to(x.dtype).contiguous().numpy()
        gn, bn = gamma.detach().to(x.dtype).numpy(), beta.detach().to(x.dtype).numpy()
        out, xhat = np.empty_like(xn), np.empty_like(xn)
        keep = np.empty_like(xn) if relu or noise.numel() else np.empty((0, 0), xn.dtype)
        mean, var = forward_kernel(xn, wn, gn, bn, eps, relu, noise.contiguous().numpy(), p, out, xhat, keep)
        ctx.saved = (xhat, wn, gn, var, eps, keep)
        mean_t, var_t = torch.from_numpy(mean), torch.from_numpy(var)
        ctx.mark_non_differentiable(mean_t, var_t)
        return torch.from_numpy(out), mean_t, var_t

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[torch.Tensor | None, ...]:
        xhat, wn, gn, var, eps, keep = ctx.saved
        dx = np.empty_like(xhat)
        dgamma, dbeta = np.empty(xhat.shape[1]), np.empty(xhat.shape[1])
        backward_kernel(grad.detach().contiguous().numpy(), xhat, wn, gn, var, eps, keep, dx, dgamma, dbeta)
        dtype = grad.dtype
        return (
            torch.from_numpy(dx),
            None,
            torch.from_numpy(dgamma).to(dtype) if ctx.needs_input_grad[2] else None,
            torch.from_numpy(dbeta).to(dtype) if ctx.needs_input_grad[3] else None,
            None, None, None, None,
        )  # fmt: skip


def weighted_batch_norm(
    x: torch.Tensor,
    w: torch.Tensor,
    gamma: torch.Tensor | None,
    beta: torch.Tensor | None,
    eps: float,
    relu: bool = False,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The normalised rows with the affine map, then ReLU and dropout where asked (module
    docstring), differentiable in x, gamma and beta, and the batch's mean and biased variance
    (float64, no gradient). Dropout's mask is drawn by torch as ``F.dropout`` draws it on the
    CPU (one ``bernoulli_(1 - p)`` over a tensor like x), so the same seed drops the same
    entries as ``nn.Dropout`` would.

    Shapes: x [R, C]; w [R]; gamma, beta [C] or None -> ([R, C], [C], [C]).
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    empty = x.new_zeros(0)
    noise = torch.empty_like(x).bernoulli_(1 - dropout) if dropout > 0 else x.new_zeros(0, 0)
    return _WeightedBatchNorm.apply(x, w, gamma if gamma is not None else empty, beta if beta is not None else empty,
                                    eps, relu, noise, dropout)  # fmt: skip
