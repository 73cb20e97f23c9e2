"""Adam whose step on the CPU is one compiled pass per parameter.

torch's CPU Adam (single-tensor, or foreach) runs about a dozen element-wise operations per
parameter per step, each a pass over the parameter's memory; with DNNTSP's item embedding
([n_items, d], most of the weights) that is a few milliseconds of every training step.
:class:`CompiledAdam` keeps torch's ``Adam`` (options, state layout, ``state_dict``, so resume
and checkpoints are unchanged) and replaces only the arithmetic of ``step`` by one numba pass
over each parameter computing the same formula in the same order:

    g  = grad (+ weight_decay * p)
    m  = lerp(m, g, 1 - beta1)
    v  = v * beta2 + (1 - beta2) * g * g
    p += -(lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

in the parameter's own precision, with the scalars computed in Python as torch computes them.
The values agree with torch's to float rounding (torch's vectorised lerp uses fused
multiply-adds). Anything else (CUDA, amsgrad, maximize, capturable, differentiable, complex or
sparse gradients, a tensor learning rate) runs torch's own step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np
import torch
from torch.autograd.graph import increment_version

from basketgnn.jit import jit_options


# The only divisor, sqrt(v) / sqrt(1 - beta2^t) + eps, is positive: numpy's error model (no
# zero-division check) lets the loop vectorise.
@numba.njit(**jit_options(__file__), error_model="numpy")
def _adam_pass(p, g, m, v, coef, low_weight):  # pragma: no cover - jit
    """One parameter's update in place. Shapes: p, g, m, v [n]; coef [8] of their dtype:
    lerp's weight w = 1 - beta1, 1 - w, beta2, 1 - beta2, -lr / (1 - beta1^t),
    sqrt(1 - beta2^t), eps, weight_decay. ``low_weight``: w < 0.5 (torch's lerp then computes
    m + w (g - m), else g - (g - m) (1 - w))."""
    weight, rest, b2, c2 = coef[0], coef[1], coef[2], coef[3]
    neg_step, bc2_sqrt, eps, wd = coef[4], coef[5], coef[6], coef[7]
    for i in range(p.shape[0]):
        gi = g[i]
        if wd != 0:
            gi = gi + wd * p[i]
        mi = m[i]
        if low_weight:
            mi = mi + weight * (gi - mi)
        else:
            mi = gi - (gi - mi) * rest
        m[i] = mi
        vi = v[i] * b2
        vi = vi + c2 * gi * gi
        v[i] = vi
        p[i] = p[i] + neg_step * mi / (np.sqrt(vi) / bc2_sqrt + eps)


def _flat(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a 1-d NumPy array (no copy). Shapes: [...] -> [numel]."""
    return t.detach().view(-1).numpy()


class CompiledAdam(torch.optim.Adam):
    """``torch.optim.Adam`` with a compiled CPU step (module docstring); same constructor.

    The NumPy views of each parameter and its state are made once and kept while the state's
    tensors are the same objects and the parameter's memory is where it was
    (``load_state_dict`` replaces the state's tensors: the views follow)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._views: dict[torch.Tensor, tuple] = {}

    def _compiled_applies(self, group: dict) -> bool:
        if group["amsgrad"] or group["maximize"] or group["capturable"] or group["differentiable"]:
            return False
        if group.get("fused") or torch.is_tensor(group["lr"]):
            return False
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.device.type != "cpu" or p.dtype not in (torch.float32, torch.float64) or p.grad.is_sparse:
                return False
            if not (p.is_contiguous() and p.grad.is_contiguous() and p.grad.dtype == p.dtype):
                return False
        return True

    def _state_views(self, p: torch.Tensor) -> tuple:
        """(param, exp_avg, exp_avg_sq, step) as NumPy arrays sharing their tensors' memory."""
        state = self.state[p]
        cached = self._views.get(p)
        tensors = (state["exp_avg"], state["exp_avg_sq"], state["step"])
        if cached is None or any(a is not b for a, b in zip(cached[0], tensors)) or cached[2] != p.data_ptr():
            step = state["step"]
            if step.dtype != torch.float32 or step.device.type != "cpu" or step.dim() != 0:
                state["step"] = step = torch.tensor(float(step), dtype=torch.float32)
                tensors = (state["exp_avg"], state["exp_avg_sq"], step)
            cached = (tensors, (_flat(p), _flat(tensors[0]), _flat(tensors[1]), step.numpy()), p.data_ptr())
            self._views[p] = cached
        return cached[1]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        if not all(self._compiled_applies(g) for g in self.param_groups):
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            with_grad = [p for p in group["params"] if p.grad is not None]
            if any(len(self.state[p]) == 0 for p in with_grad):
                self._init_group(group, [], [], [], [], [], [])  # torch's own state, zeros and step 0
            beta1, beta2 = group["betas"]
            weight = 1 - beta1
            coefs: dict[tuple, np.ndarray] = {}  # per (step, dtype): the same for most parameters
            for p in with_grad:
                p_np, m_np, v_np, step_np = self._state_views(p)
                step_np += 1  # torch's float32 step counter, in place
                key = (float(step_np), p_np.dtype)
                coef = coefs.get(key)
                if coef is None:
                    t = key[0]
                    step_size = group["lr"] / (1 - beta1**t)
                    dtype = key[1].type
                    coef = coefs[key] = np.array(
                        [weight, dtype(1) - dtype(weight), beta2, 1 - beta2, -step_size,
                         math.sqrt(1 - beta2**t), group["eps"], group["weight_decay"]], dtype=key[1],
                    )  # fmt: skip
                _adam_pass(p_np, _flat(p.grad), m_np, v_np, coef, weight < 0.5)
                # Written through NumPy: count the in-place change as torch's own ops do, so
                # autograd's checks and caches keyed on versions (weighted_gcn.state_key) see it.
                increment_version(p)
        return loss
