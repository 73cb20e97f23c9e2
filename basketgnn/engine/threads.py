"""The threads that scoring runs on: helper threads kept for the process, and torch's intra-op
threads narrowed inside a block.

A ranking call on several threads hands its forward batches and search parts to helper threads
(:mod:`basketgnn.recommenders.neural`, :mod:`basketgnn.recommenders.fused`). ``recommend`` and
the evaluation make one such call per chunk of customers, and a server one per request; threads
made afresh for each call pay their start and their first, largest batch's per-thread set-up
(allocator arenas, torch's and numba's thread state) every time, so :func:`helper_threads` keeps
one pool per size for the process and every call shares it.

Shared safely: a call's parts never wait on another call's, so two calls at once queue on the
same threads and both finish; a call made on a helper thread itself (a part that scores) gets a
pool of its own, since waiting on the pool it occupies could wait for ever; a forked child makes
its own pools (its parent's threads do not exist there).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

#: The name every kept helper thread's name starts with.
THREAD_PREFIX = "basketgnn-helper"

_lock = threading.Lock()
_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}  # (pid, threads) -> the kept pool


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


@contextmanager
def helper_threads(n: int) -> Iterator[ThreadPoolExecutor]:
    """A pool of ``n`` helper threads for the block: the process's kept pool of that size (made
    on first use), or a pool of the block's own when called on a kept helper thread. The caller
    waits for what it submitted before the block ends; the kept pool stays open."""
    if n < 1:
        raise ValueError(f"helper_threads needs at least 1 thread, got {n}")
    if threading.current_thread().name.startswith(THREAD_PREFIX):
        with ThreadPoolExecutor(max_workers=n) as own:
            yield own
        return
    key = (os.getpid(), n)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"{THREAD_PREFIX}-{n}")
    yield pool


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block."""
    before = torch.get_num_threads()
    if before == n:  # setting it costs milliseconds (the thread pool is rebuilt)
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
