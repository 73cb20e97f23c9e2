"""The C allocator's thresholds for scoring jobs: set once per process on glibc, by the first
kept_helpers block, not at all when asked for the defaults; and freed blocks are reused instead
of being faulted in again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from basketgnn.engine import allocator, threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")


def run_child(code: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_thresholds_are_set_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "_done", {})
    monkeypatch.setattr(allocator, "_set_thresholds", lambda: calls.append(1) or True)
    assert allocator.keep_freed_memory() and allocator.keep_freed_memory()
    assert calls == [1]


def test_the_outer_kept_helpers_block_keeps_freed_memory(monkeypatch):
    calls = []
    monkeypatch.setattr(threads, "keep_freed_memory", lambda: calls.append(1) or True)
    with threads.kept_helpers(), threads.kept_helpers():
        pass
    assert calls == [1]


def test_the_defaults_when_asked_for():
    code = "import json; from basketgnn.engine.allocator import keep_freed_memory; print(json.dumps(keep_freed_memory()))"
    assert run_child(code, BASKETGNN_ALLOCATOR_DEFAULTS="1") is False
    assert run_child(code) is (os.confstr("CS_GNU_LIBC_VERSION") is not None)


def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    """Blocks of growing sizes (4 to 28 MiB), each written and freed: with glibc's defaults
    each one above the adaptive threshold is mapped afresh and faulted in page by page; with
    the thresholds set they come from one heap that grows to the largest."""
    if os.confstr("CS_GNU_LIBC_VERSION") is None:
        pytest.skip("not glibc")
    code = """
        import ctypes, ctypes.util, json, resource
        from basketgnn.engine.allocator import keep_freed_memory
        keep_freed_memory()
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for mib in range(4, 32, 4):
            block = libc.malloc(mib << 20)
            ctypes.memset(block, 1, mib << 20)  # every page written
            libc.free(block)
        print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
    """
    kept = run_child(code)
    default = run_child(code, BASKETGNN_ALLOCATOR_DEFAULTS="1")
    assert default > 20_000  # 112 MiB mapped afresh: about 28,700 pages
    assert kept < default / 2, (kept, default)
