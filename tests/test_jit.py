"""What the compiled kernels share (basketgnn/jit.py): numba caches compiled code only where it
can write it (NUMBA_CACHE_DIR, the module's folder or its __pycache__, the user's cache folder),
and compiles in every process, without raising, where nothing is writable. When a compiled
inference path may stand in for a tensor path is tested with the attention kernel
(tests/nn/test_attention_kernel.py::test_gradients_and_dropout_keep_the_tensor_path); here only
the device and dtype conditions it leaves out. The prefetch hints compile to LLVM's prefetch and
leave every value as it is (the kernels that use them are compared with their references in
tests/nn/test_attention_kernel.py and tests/scoring/)."""

from __future__ import annotations

import os

import numba
import numpy as np
import pytest
import torch

import basketgnn.jit as jit
from basketgnn.jit import can_cache, compiled_inference_applies, jit_options, prefetch, prefetch_row


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No NUMBA_CACHE_DIR, and a user cache folder (XDG_CACHE_HOME) that does not exist."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    return tmp_path


def test_nothing_writable_means_no_cache(nowhere):
    module = nowhere / "missing-package" / "kernels.py"
    assert can_cache(str(module)) is False
    assert jit_options(str(module)) == {"cache": False, "nogil": True}


def test_numba_cache_dir_means_cache(nowhere, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(nowhere / "anywhere"))
    assert can_cache(str(nowhere / "missing-package" / "kernels.py")) is True


def test_a_writable_module_folder_or_user_cache_means_cache(nowhere, monkeypatch):
    (nowhere / "package").mkdir()
    assert jit_options(str(nowhere / "package" / "kernels.py")) == {"cache": True, "nogil": True}
    (nowhere / "no-cache").mkdir()  # XDG_CACHE_HOME now exists
    assert can_cache(str(nowhere / "missing-package" / "kernels.py")) is True
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(nowhere / "home"))  # without XDG_CACHE_HOME: ~/.cache
    assert can_cache(str(nowhere / "missing-package" / "kernels.py")) is False
    (nowhere / "home" / ".cache").mkdir(parents=True)
    assert can_cache(str(nowhere / "missing-package" / "kernels.py")) is True


def test_existing_folders_that_are_not_writable_mean_no_cache(nowhere, monkeypatch):
    """Writability is os.access(W_OK) (faked: tests may run as root, who may write anywhere)."""
    (nowhere / "package" / "__pycache__").mkdir(parents=True)
    (nowhere / "no-cache").mkdir()
    asked = []

    def no_write(path, mode):
        asked.append((str(path), mode))
        return False

    monkeypatch.setattr(jit.os, "access", no_write)
    assert can_cache(str(nowhere / "package" / "kernels.py")) is False
    assert {p for p, _ in asked} == {str(nowhere / "package" / "__pycache__"), str(nowhere / "package"),
                                     str(nowhere / "no-cache")}  # fmt: skip
    assert {m for _, m in asked} == {os.W_OK}


def test_compiled_inference_needs_a_cpu_float_tensor():
    x = torch.randn(3, 4)
    assert compiled_inference_applies(x) and compiled_inference_applies(x.double())
    assert not compiled_inference_applies(x.to(torch.bfloat16))
    assert not compiled_inference_applies(torch.empty(3, 4, device="meta"))


@numba.njit
def _gather_with_hints(table, flat, rows, ahead):
    """Σ table[rows[j]] and Σ flat[rows[j]], hinting the rows ``ahead`` positions on."""
    total = 0.0
    for j in range(len(rows)):
        if j + ahead < len(rows):
            prefetch_row(table, rows[j + ahead])
            prefetch(flat, rows[j + ahead])
        for c in range(table.shape[1]):
            total += table[rows[j], c]
        total += flat[rows[j]]
    return total


@pytest.mark.parametrize("dtype, width", [(np.float32, 72), (np.float64, 3), (np.int64, 17)])
def test_prefetch_hints_compile_to_llvm_prefetch_and_change_no_value(dtype, width):
    rng = np.random.default_rng(0)
    table = rng.integers(0, 100, size=(501, width)).astype(dtype)  # rows of 288 B start mid-line
    flat = rng.integers(0, 100, size=501).astype(dtype)
    rows = np.concatenate([rng.integers(0, 501, size=300), [0, 500, 500]])  # first and last rows
    for ahead in (0, 3, 1000):
        got = _gather_with_hints(table, flat, rows, ahead)
        assert got == float(table[rows].sum(dtype=np.float64) + flat[rows].sum(dtype=np.float64))
    ir = next(iter(_gather_with_hints.inspect_llvm().values()))
    assert "@llvm.prefetch" in ir
