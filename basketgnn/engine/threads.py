"""The threads that scoring runs on: helper threads, kept across the calls of one job, and
torch's intra-op threads narrowed inside a block.

A ranking call on several threads hands its forward batches and search parts to helper threads
(:mod:`basketgnn.recommenders.neural`, :mod:`basketgnn.recommenders.fused`), and so does
training's validation (:mod:`basketgnn.recommenders.shared_scoring`). ``recommend`` and the
evaluation make one ranking call per chunk of customers; threads made afresh for each call pay
their start and their first, largest batch's per-thread set-up (allocator arenas, torch's and
numba's thread state) every time. Inside :func:`kept_helpers` (``rank_items`` and
``write_recommendation_parts`` open it around their chunks) the calls share one pool per size.

The pools end with that block: no helper thread outlives the job it served. A live helper that
has run torch's operations keeps OpenMP state, and while a process holds more such threads than
cores libgomp spins less before it sleeps, so the process's later OpenMP work (a training run:
small operations, many parallel regions) runs markedly slower.

Outside such a block, and on a helper thread itself (a part that scores: waiting on the pool it
occupies could wait for ever), each call gets a pool of its own that ends with the call. A
forked child never reuses its parent's pools (their threads do not exist there).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

#: The name every helper thread's name starts with.
THREAD_PREFIX = "basketgnn-helper"

_local = threading.local()  # .scope: (pid, {threads: pool}) of this thread's open kept_helpers block


@contextmanager
def kept_helpers() -> Iterator[None]:
    """Inside the block, :func:`helper_threads` on this thread reuses one pool per size, made on
    first use; the pools are shut down (their threads joined) when the outermost block ends."""
    if _open_scope() is not None:  # nested: the outer block's pools
        yield
        return
    _local.scope = (os.getpid(), {})
    try:
        yield
    finally:
        pools = _local.scope[1]
        _local.scope = None
        for pool in pools.values():
            pool.shutdown(wait=True)


@contextmanager
def helper_threads(n: int) -> Iterator[ThreadPoolExecutor]:
    """A pool of ``n`` helper threads for the block: the enclosing :func:`kept_helpers` block's
    pool of that size, or else one of the block's own, shut down at its end. The caller waits
    for what it submitted before the block ends."""
    if n < 1:
        raise ValueError(f"helper_threads needs at least 1 thread, got {n}")
    pools = _open_scope()
    if pools is None:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix=THREAD_PREFIX) as own:
            yield own
        return
    pool = pools.get(n)
    if pool is None:
        pool = pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"{THREAD_PREFIX}-{n}")
    yield pool


def _open_scope() -> dict[int, ThreadPoolExecutor] | None:
    """This thread's open kept_helpers pools (None: none open, or opened before a fork)."""
    scope = getattr(_local, "scope", None)
    if scope is None or scope[0] != os.getpid():
        return None
    return scope[1]


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block (torch is imported here: ranking
    a baseline's chunks opens :func:`kept_helpers` without it)."""
    import torch

    before = torch.get_num_threads()
    if before == n:  # setting it costs milliseconds (the thread pool is rebuilt)
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
