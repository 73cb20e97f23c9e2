"""What the compiled kernels share (the ``*_kernel`` modules of scoring/, ``graph.build_kernel``
and nn/): numba's options, the default sizes they specialise for, and when a compiled inference
path may stand in for a module's tensor path (:func:`compiled_inference_applies`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

# DNNTSP's default sizes: a 32-wide embedding, attention in 4 heads of 8. The training kernels
# (nn.attention_train_kernel, nn.gcn_kernel) compile a copy of their work with these as
# constants, where the compiler unrolls the loops over heads and features; any other size runs
# the general copy, with the same results. The inference attention kernel does not: there the
# copy costs far more compile time on first use than it saves. numba's cache does not see a
# change here: clear the kernels' __pycache__ after changing them.
DEFAULT_WIDTH, DEFAULT_HEADS, DEFAULT_D_HEAD = 32, 4, 8


def can_cache(module_file: str) -> bool:
    """Whether numba can keep the compiled code of the module at ``module_file``:
    NUMBA_CACHE_DIR, the module's folder (or its ``__pycache__``) or the user's cache folder is
    writable (else numba raises at import; the kernels then compile in every process)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    here = Path(module_file).resolve().parent
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return any(os.access(p, os.W_OK) for p in (here / "__pycache__", here, user) if p.exists())


def jit_options(module_file: str) -> dict[str, Any]:
    """``numba.njit`` options: cache when possible, release the GIL (the recommender runs the
    kernels on worker threads beside each other and beside torch)."""
    return {"cache": can_cache(module_file), "nogil": True}


def compiled_training_applies(x: torch.Tensor) -> bool:
    """Whether a compiled training kernel (NumPy in and out behind a ``torch.autograd.Function``)
    may stand in for a module's tensor path: ``x`` a CPU float32/64 tensor."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


def compiled_inference_applies(
    x: torch.Tensor, *params: torch.Tensor | None, training: bool = False, dropout: float = 0.0
) -> bool:
    """Whether a compiled inference kernel (NumPy in, NumPy out: no autograd) may stand in for
    a module's tensor path: ``x`` a CPU float32/64 tensor, no gradient to track through ``x``
    or any of ``params`` (the module's weights used on the way), no dropout acting."""
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *params))
    return compiled_training_applies(x) and not needs_grad and not (training and dropout > 0)
