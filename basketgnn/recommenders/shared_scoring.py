"""Scoring in shared form (a spec's ``score_sparse``): a module's scores of a set of instances as
one row shared by every instance plus each instance's own entries, batched as the engine's
scoring batches them (:func:`~basketgnn.engine.batching.length_batches` with
:func:`~basketgnn.engine.batching.score_work`), the batches run on one thread or shared by
several kept helper threads (:func:`run_shared`).

Ranking reads a few candidates per instance from the result
(:func:`basketgnn.scoring.candidates.fused_top_k`), with the same items, values and ties as
ranking the dense [n, I] matrix that ``module(batch)`` gives. ``NeuralRecommender.rank`` ranks
this way, and so do training's validations after the first (:func:`shared_ranking`, handed
to the engine) where the model's configuration has that form and validation is long enough to
gain from several threads.

A ranking on several threads runs the forward beside a per-customer search (TIFU-KNN's, for
the fusion), both in parts that every thread takes from (:func:`forward_beside`,
:class:`SharedParts`), and then, where each row's ranking depends on that row alone, its rows
in parts on every thread (:func:`ranked_in_parts`, :func:`~basketgnn.engine.threads.in_parts`).
A reading of a few items per customer (the re-ranking stage's candidates) may ask the forward
for the own entries at those items alone (:meth:`SharedPlan.reading`).

Shapes: n instances of a :class:`~basketgnn.models.spec.BatchSource`, I catalogue items, M a
batch's own entries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import wait
from typing import Any

import numpy as np
import torch
from torch import nn

from basketgnn.data.dataset import _offsets
from basketgnn.data.split import Instances
from basketgnn.engine.batching import SCORE_BATCH, length_batches, source_sizes
from basketgnn.engine.threads import SharedParts, helper_threads, torch_threads
from basketgnn.engine.trainer import ValidationRank, dense_ranking
from basketgnn.models.spec import BatchSource
from basketgnn.scoring.candidates import SharedScores, fused_top_k

#: Instances per part of a search run beside the forward (:func:`forward_beside`): small
#: enough that the parts even out the threads' ends.
SEARCH_PART = 256
#: Seconds the first (dense, one-thread) validation takes before training's later validations
#: run in shared form on several threads. Helper threads that ran torch's operations leave
#: OpenMP state behind that slows the training steps after them even when their pool has ended,
#: so a validation too short to save more than that stays on the training thread, dense as the
#: engine's: short histories validate well under this bound, long ones (hundreds of nodes a
#: customer) above it.
PARALLEL_VALIDATION_S = 0.15

#: Rows a ranking part holds at least: fewer rows rank on the calling thread alone (handing a
#: part to a helper costs more than it saves).
RANK_PART_ROWS = 256

#: One batch's result: (shared row [I], instance of each entry [M], item [M], value [M]),
#: float32 values, or None when the configuration has no shared form.
BatchResult = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None


class SharedPlan:
    """The forward batches of a set of instances (``forward`` of each of ``batches``, on any
    thread) and how their results make the instances' SharedScores (:meth:`assemble`, the
    results in batch order)."""

    def __init__(self, batches: list[np.ndarray], forward: Callable[..., BatchResult], n: int) -> None:
        self.batches, self.forward, self.n = batches, forward, n

    def reading(self, wanted: np.ndarray) -> SharedPlan:
        """The same batches with the own entries needed only at ``wanted`` (each instance's
        items a reading takes: the spec's ``score_sparse`` with ``wanted``), so the forward may
        skip the others' work; the scores at those items are this plan's.
        Shapes: wanted [n, C] item indices."""
        if len(wanted) != self.n:
            raise ValueError(f"wanted has {len(wanted)} rows for {self.n} instances")
        return SharedPlan(self.batches, lambda idx: self.forward(idx, wanted[idx]), self.n)

    def assemble(self, done: list[BatchResult]) -> SharedScores | None:
        """The SharedScores of the ``forward`` results in batch order (None when the
        configuration has no shared form)."""
        if any(d is None for d in done):
            return None
        parts = [d for d in done if d is not None]
        base = parts[0][0]  # [I], the same in every batch
        row = np.concatenate([p[1] for p in parts]).astype(np.int64)
        order = np.argsort(row, kind="stable")
        offsets = _offsets(np.bincount(row, minlength=self.n))
        items = np.concatenate([p[2] for p in parts]).astype(np.int64)[order]
        return SharedScores(base, offsets, items, np.concatenate([p[3] for p in parts])[order])


def shared_plan(
    module: nn.Module,
    score_sparse: Callable[..., Any],
    source: BatchSource,
    device: torch.device,
    batch_size: int,
    work: int,
    longest_first: bool = True,
) -> SharedPlan:
    """The plan of ``score_sparse(module, batch)`` over every instance of ``source`` (the
    module set to eval). The batches are ``length_batches(source.lengths, batch_size, None,
    sizes, work)``, dense scoring's; with ``longest_first`` they are taken in reverse, longest
    histories first, so threads that share them end on short ones and finish together (the
    scores do not depend on the order)."""
    module.eval()

    def forward(idx: np.ndarray, wanted: np.ndarray | None = None) -> BatchResult:
        with torch.inference_mode():  # per thread
            batch = source.collate(idx, with_targets=False).to(device)
            if wanted is None:
                out = score_sparse(module, batch)
            else:
                out = score_sparse(module, batch, torch.as_tensor(wanted, dtype=torch.int64, device=device))
            if out is None:
                return None
            base, value = out.base.float().cpu().numpy(), out.value.float().cpu().numpy()  # [I], [M]
            return base, idx[out.row.cpu().numpy()], out.item.cpu().numpy(), value

    batches = length_batches(source.lengths, batch_size, None, source_sizes(source), work)
    return SharedPlan(batches[::-1] if longest_first else batches, forward, len(source))


def run_shared(plan: SharedPlan, threads: int) -> SharedScores | None:
    """The plan's SharedScores (None: no shared form), its batches run on this thread, or with
    ``threads`` > 1 on that many kept helper threads with one torch thread each. The batches
    are the same either way, and so are the scores."""
    if threads <= 1:
        return plan.assemble([plan.forward(b) for b in plan.batches])
    with helper_threads(threads) as pool, torch_threads(1):
        futures = [pool.submit(plan.forward, b) for b in plan.batches]
        wait(futures)  # every batch ends before an error goes up: none runs on after the call
        return plan.assemble([f.result() for f in futures])


def ranked_in_parts(
    rank_rows: Callable[[int, int], tuple[np.ndarray, np.ndarray]], n: int, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """``rank_rows(start, stop)`` (each row's items and values, [stop − start, k] each) of n
    rows in up to ``threads`` consecutive ranges of at least :data:`RANK_PART_ROWS` rows, the
    first on this thread and the others on kept helper threads at once, stacked in row order.
    Where each row's ranking depends on that row alone (:func:`~basketgnn.scoring.candidates.
    fused_top_k`), this is ``rank_rows(0, n)``, bit for bit. Shapes: -> ([n, k], [n, k])."""
    parts = min(threads, n // RANK_PART_ROWS)
    if parts <= 1:
        return rank_rows(0, n)
    bounds = [n * j // parts for j in range(parts + 1)]
    with helper_threads(parts - 1) as pool:
        futures = [pool.submit(rank_rows, a, b) for a, b in zip(bounds[1:-1], bounds[2:])]
        try:
            first = rank_rows(bounds[0], bounds[1])
        finally:
            wait(futures)  # the helpers' parts end before the call returns or raises
        done = [first] + [f.result() for f in futures]
    return np.concatenate([d[0] for d in done]), np.concatenate([d[1] for d in done])


def shared_ranking(
    score_sparse: Callable[..., Any],
    threads: int,
    n_items: int,
    parallel_after_s: float | None = None,
) -> ValidationRank:
    """Training's validation ranking (:data:`~basketgnn.engine.trainer.ValidationRank`), the
    same top k as the dense scores' either way. The first validation ranks the dense scores on
    this thread, as the engine does, and it decides: when it took at least ``parallel_after_s``
    seconds (default :data:`PARALLEL_VALIDATION_S`) and ``threads`` > 1, the later ones rank
    the scores in shared form on ``threads`` helper threads; else they answer None and the
    engine ranks the dense scores, so a run that validates on one thread never runs the shared
    form. A configuration without the shared form answers None from then on."""
    state = {"first": True, "use": threads > 1}
    after_s = PARALLEL_VALIDATION_S if parallel_after_s is None else parallel_after_s

    def rank(module: nn.Module, source: BatchSource, device: torch.device, work: int, k: int) -> np.ndarray | None:
        if not state["use"]:
            return None
        if state["first"]:  # it decides: on the helpers from now on, or the engine's dense path
            state["first"] = False
            start = time.perf_counter()
            ranked = dense_ranking(module, source, n_items, device, work, k)
            state["use"] = time.perf_counter() - start >= after_s
            return ranked
        scores = run_shared(shared_plan(module, score_sparse, source, device, SCORE_BATCH, work), threads)
        if scores is None:
            state["use"] = False
            return None
        return fused_top_k(scores, k)[0]

    return rank


def forward_beside(
    base: Any, data: Any, instances: Instances, threads: int, search: Callable[[Instances], Any]
) -> tuple[SharedScores | None, list[Any]]:
    """``base``'s scores in shared form (None where its configuration has none: its
    ``shared_plan``) and ``search(part)`` of every part of :data:`SEARCH_PART` instances, in
    part order.

    The search in small parts and the model's forward batch by batch, shared by this thread and
    threads - 1 helpers (one torch thread each): the helpers start on the search while this
    thread builds the graphs, then each thread takes forward batches (this thread first) and
    search parts (the helpers first) until none is left, so the two cores stay busy to the end.
    Each part's result is the one a single search (or forward) gives its customers, in part
    order: the output does not depend on who ran what. An error in any part stops the others'
    taking more and goes up."""
    n_parts = max(1, -(-len(instances) // SEARCH_PART))
    jobs = SharedParts(
        [Instances(instances.users[idx], instances.n_history[idx])
         for idx in np.array_split(np.arange(len(instances)), n_parts)],
        search,
    )  # fmt: skip
    forward: list[SharedParts] = []  # the forward's parts, once the graphs are built
    built = threading.Event()

    def helper() -> None:
        try:
            jobs.drain()
            built.wait()
            for parts in forward:
                parts.drain()
        except BaseException:
            jobs.stop()
            for parts in forward:
                parts.stop()
            raise

    with helper_threads(threads - 1) as pool, torch_threads(1):
        helpers = [pool.submit(helper) for _ in range(threads - 1)]
        plan = None
        try:
            plan = base.shared_plan(data, instances)
            if plan is not None:
                forward.append(SharedParts(plan.batches, plan.forward))
            built.set()
            for parts in forward:
                parts.drain()
            jobs.drain()
        except BaseException:
            jobs.stop()  # the helpers finish their part and stop; the error goes up
            for parts in forward:
                parts.stop()
            raise
        finally:
            built.set()
            wait(helpers)  # the helpers end their part before the call returns or raises
        for h in helpers:
            h.result()  # a part's error
    scores = plan.assemble(forward[0].results()) if plan is not None else None
    return scores, jobs.results()
