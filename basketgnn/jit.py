"""numba options shared by the compiled kernels (``scoring.kernels``, ``nn.attention_kernel``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


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
