"""The C allocator's thresholds for scoring jobs: large freed blocks stay with the process for
the next batch instead of going back to the system.

A scoring batch allocates and frees tens of megabytes (graphs, GCN rows, the attention's
inputs). With glibc's defaults a freed block above the mmap threshold, or a heap top above the
trim threshold, goes back to the system, and the next batch faults the same amount of memory in
again, page by page. :func:`keep_freed_memory` raises both thresholds once per process, the way
glibc's own adaptive threshold ends up after its first large frees, with a larger margin
before the heap is trimmed. The computation is untouched; only where memory comes from changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

#: Blocks up to this size come from the heap (glibc's adaptive threshold rises to 32 MiB).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of a heap kept for reuse before it is returned to the system.
TRIM_THRESHOLD = 256 << 20

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_done: dict[int, bool] = {}  # process id -> whether the thresholds were set


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD`, :data:`TRIM_THRESHOLD`)
    once in this process; True when they are set. Elsewhere than glibc (musl, macOS, Windows),
    or when ``BASKETGNN_ALLOCATOR_DEFAULTS=1`` asks for the allocator's defaults, nothing changes
    and it returns False. Process-wide and lasting: the scoring jobs call it
    (:func:`~basketgnn.engine.threads.kept_helpers`)."""
    pid = os.getpid()
    with _lock:
        if pid not in _done:
            _done[pid] = os.environ.get("BASKETGNN_ALLOCATOR_DEFAULTS") != "1" and _set_thresholds()
        return _done[pid]


def _set_thresholds() -> bool:
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: mallopt's parameters differ elsewhere
            return False
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
