"""The threads that scoring runs on: helper threads, kept across the calls of one job, and
torch's intra-op threads narrowed inside a block.

A ranking call on several threads hands its forward batches and search parts to helper threads
(:mod:`basketgnn.recommenders.neural`, :mod:`basketgnn.recommenders.fused`,
:mod:`basketgnn.recommenders.reranked`, through :mod:`basketgnn.recommenders.shared_scoring`),
and so does training's validation. ``recommend`` and the
evaluation make one ranking call per chunk of customers; threads made afresh for each call pay
their start and their first, largest batch's per-thread set-up (allocator arenas, torch's and
numba's thread state) every time. Inside :func:`kept_helpers` (``rank_items`` and
``write_recommendation_parts`` open it around their chunks) the calls share one pool per size,
and torch's thread count, once a call narrows it (:func:`torch_threads`), stays narrowed until
the block ends or a dense forward sets the job's count again
(:func:`~basketgnn.engine.trainer.setup_torch`): setting it costs milliseconds (torch rebuilds
its thread pools and starts their threads anew), and a job's ranking calls mostly ask for the
same count.

The pools end with that block: no helper thread outlives the job it served. A live helper that
has run torch's operations keeps OpenMP state, and while a process holds more such threads than
cores libgomp spins less before it sleeps, so the process's later OpenMP work (a training run:
small operations, many parallel regions) runs markedly slower.

Outside such a block, and on a helper thread itself (a part that scores: waiting on the pool it
occupies could wait for ever), each call gets a pool of its own that ends with the call. A
forked child never reuses its parent's pools (their threads do not exist there).

:func:`in_parts` runs a list of independent parts on this thread and helpers, each part once,
taken in turn (:class:`SharedParts`): a ranking's rows in parts, the re-ranking stage's
ranking part by part (each part searched, scored and ordered on one thread), and the features
of the instances the stage learns from (:func:`~basketgnn.scoring.rerank.fit_stage`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

from basketgnn.engine.allocator import keep_freed_memory

#: The name every helper thread's name starts with.
THREAD_PREFIX = "basketgnn-helper"

_local = threading.local()  # .scope: this thread's open kept_helpers block (a _Scope)


class _Scope:
    """An open :func:`kept_helpers` block: the process it was opened in, its pools by size, and
    torch's thread count before a call first narrowed it (None: not narrowed)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.pools: dict[int, ThreadPoolExecutor] = {}
        self.torch_before: int | None = None


@contextmanager
def kept_helpers() -> Iterator[None]:
    """Inside the block, :func:`helper_threads` on this thread reuses one pool per size, made on
    first use, and :func:`torch_threads` leaves torch's thread count narrowed; when the
    outermost block ends, the pools are shut down (their threads joined) and torch's count is
    restored. The first block of a process also has the C allocator keep large freed blocks
    for reuse (:func:`~basketgnn.engine.allocator.keep_freed_memory`)."""
    if _open_scope() is not None:  # nested: the outer block's pools
        yield
        return
    keep_freed_memory()
    scope = _local.scope = _Scope()
    try:
        yield
    finally:
        _local.scope = None
        for pool in scope.pools.values():
            pool.shutdown(wait=True)
        if scope.torch_before is not None:
            import torch

            torch.set_num_threads(scope.torch_before)


@contextmanager
def helper_threads(n: int) -> Iterator[ThreadPoolExecutor]:
    """A pool of ``n`` helper threads for the block: the enclosing :func:`kept_helpers` block's
    pool of that size, or else one of the block's own, shut down at its end. The caller waits
    for what it submitted before the block ends."""
    if n < 1:
        raise ValueError(f"helper_threads needs at least 1 thread, got {n}")
    scope = _open_scope()
    if scope is None:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix=THREAD_PREFIX) as own:
            yield own
        return
    pool = scope.pools.get(n)
    if pool is None:
        pool = scope.pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"{THREAD_PREFIX}-{n}")
    yield pool


def torch_thread_count() -> int:
    """torch's intra-op thread count as set outside :func:`torch_threads`: inside a
    :func:`kept_helpers` block that a call narrowed, the count before the narrowing (the count
    a later call of the job is to use), else torch's current count."""
    import torch

    scope = _open_scope()
    if scope is not None and scope.torch_before is not None:
        return scope.torch_before
    return int(torch.get_num_threads())


def _open_scope() -> _Scope | None:
    """This thread's open kept_helpers block (None: none open, or opened before a fork)."""
    scope: _Scope | None = getattr(_local, "scope", None)
    if scope is None or scope.pid != os.getpid():
        return None
    return scope


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block, and restored after it; inside a
    :func:`kept_helpers` block on this thread, restored when that block ends (torch is imported
    here: ranking a baseline's chunks opens :func:`kept_helpers` without it)."""
    import torch

    before = torch.get_num_threads()
    if before == n:  # setting it costs milliseconds (the thread pools are rebuilt)
        yield
        return
    torch.set_num_threads(n)
    scope = _open_scope()
    if scope is not None:
        if scope.torch_before is None:
            scope.torch_before = before
        yield
        return
    try:
        yield
    finally:
        torch.set_num_threads(before)


def in_parts(run: Callable[[Any], Any], parts: list[Any], threads: int) -> list[Any]:
    """``run(part)`` of every part, in part order, the parts taken in turn by this thread and
    ``threads`` - 1 kept helper threads (:class:`SharedParts`). An error in a part goes up after
    the helpers end theirs."""
    if threads <= 1 or len(parts) <= 1:
        return [run(part) for part in parts]
    jobs = SharedParts(parts, run)
    with helper_threads(threads - 1) as pool:
        helpers = [pool.submit(jobs.drain) for _ in range(threads - 1)]
        try:
            jobs.drain()
        finally:
            wait(helpers)  # the helpers end their part before the call returns or raises
        for h in helpers:
            h.result()
    return jobs.results()


class SharedParts:
    """Parts of a job that any number of threads take in turn, each part once (``drain``);
    ``results`` in part order. An error in a part is raised by the thread that ran it, and the
    other threads stop taking parts (as after ``stop``)."""

    def __init__(self, parts: list[Any], run: Callable[[Any], Any]) -> None:
        self._parts, self._run = parts, run
        self._results: list[Any] = [None] * len(parts)
        self._next = 0
        self._failed = False
        self._lock = threading.Lock()

    def drain(self) -> None:
        while True:
            with self._lock:
                i = self._next
                if self._failed or i >= len(self._parts):
                    return
                self._next += 1
            try:
                self._results[i] = self._run(self._parts[i])
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """No part is started after this (the ones running finish)."""
        self._failed = True

    def results(self) -> list[Any]:
        return self._results
