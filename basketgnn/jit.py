"""What the compiled kernels share (the ``*_kernel`` modules of scoring/, ``graph.build_kernel``
and nn/): numba's options, the default sizes they specialise for, and when a compiled inference
path may stand in for a module's tensor path (:func:`compiled_inference_applies`), and the
prefetch hints of the kernels that gather rows in an order of their own (:func:`prefetch`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numba
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# DNNTSP's default sizes: a 32-wide embedding, attention in 4 heads of 8. The training kernels
# (nn.attention_train_kernel, nn.gcn_kernel) compile a copy of their work with these as
# constants, where the compiler unrolls the loops over heads and features; any other size runs
# the general copy, with the same results. The inference attention kernel copies only its two
# hottest paths (nodes bought once, the score sums): a copy of the whole kernel costs far more
# compile time on first use than it saves. numba's cache does not see a
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


def _emit_prefetch(context: Any, builder: Any, array_type: Any, array: Any, indices: list[Any]) -> Any:
    """LLVM's ``llvm.prefetch`` (read, high locality, data cache) of ``array[indices]``'s address."""
    view = context.make_array(array_type)(context, builder, array)
    pointer = cgutils.get_item_pointer(context, builder, array_type, view, indices, wraparound=False)
    byte_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    function_type = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
    function = cgutils.get_or_insert_function(builder.module, function_type, "llvm.prefetch.p0i8")
    builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])
    return context.get_dummy_value()


@intrinsic
def prefetch(typingctx: Any, array: Any, index: Any) -> Any:  # pragma: no cover - jit
    """``prefetch(a, i)`` in compiled code: a hint to the CPU that the cache line of ``a[i]``
    (1-D) is about to be read; no effect on any value. A kernel that reads rows in an order of
    its own issues it a few rows ahead, so the lines arrive while the rows before are computed."""
    return types.void(array, index), lambda context, builder, sig, args: _emit_prefetch(
        context, builder, sig.args[0], args[0], [args[1]]
    )


@intrinsic
def prefetch_2d(typingctx: Any, array: Any, row: Any, column: Any) -> Any:  # pragma: no cover - jit
    """:func:`prefetch` of ``a[i, j]`` (2-D, C-contiguous)."""
    return types.void(array, row, column), lambda context, builder, sig, args: _emit_prefetch(
        context, builder, sig.args[0], args[0], [args[1], args[2]]
    )


@numba.njit(inline="always")
def prefetch_row(array: Any, row: int) -> None:  # pragma: no cover - jit
    """:func:`prefetch` of every cache line of ``array[row]`` (2-D, C-contiguous)."""
    width = array.shape[1]
    for column in range(0, width, max(64 // array.itemsize, 1)):
        prefetch_2d(array, row, column)
    prefetch_2d(array, row, width - 1)  # a row that starts mid-line ends on one more
