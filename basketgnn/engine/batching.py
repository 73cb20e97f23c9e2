"""Batches of the engine: the seeded batch plan of an epoch (length-bucketed by default, or
the instances in a seeded shuffled order or in their own order; one process or a slice per DDP
rank) and the batched scoring of a set of instances (no gradients).

Shapes: n instances of a :class:`~basketgnn.models.spec.BatchSource`, I catalogue items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from basketgnn.errors import UserError
from basketgnn.models.spec import BatchSource

if TYPE_CHECKING:
    from basketgnn.models.options import TrainOptions


def length_batches(
    lengths: np.ndarray,
    batch_size: int,
    rng: np.random.Generator | None,
    sizes: np.ndarray | None = None,
    work: int = 0,
    min_rows: int = 1,
) -> list[np.ndarray]:
    """Split indices into batches of similar ``lengths``, in random order when ``rng`` is given.

    Sorting by (length, random key) keeps padding small while still mixing users between epochs.
    With ``sizes`` and ``work`` > 0 a batch also closes before its work, sum of ``sizes`` times
    its longest ``lengths``, would pass ``work`` (but holds at least ``min_rows`` rows, the
    plan's last one excepted): long histories get fewer customers per batch and the step's
    temporaries stay bounded. While no batch of ``batch_size`` reaches ``work``, the batches
    (and the random draws) are exactly those without the bound.

    Example: lengths [1, 1, 2, 2], sizes [3, 3, 5, 5], batch_size 4, work 20: in length order
    the work of the first e rows is 3, 6, 2 * 13 = 26, ... so the first batch closes after 2
    rows; the second, [5, 5] at length 2, has work 20 and holds both.

    Shapes: lengths [n], sizes [n] -> batches of indices into them.
    """
    tie = rng.random(len(lengths)) if rng is not None else np.arange(len(lengths))
    order = np.lexsort((tie, lengths))
    if sizes is None or work <= 0:
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    else:
        size_sum = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64)[order])])  # [n + 1]
        longest = np.asarray(lengths, dtype=np.int64)[order]  # rows are in length order
        batches, start = [], 0
        while start < len(order):
            end = min(start + batch_size, len(order))
            # Work of rows start .. e - 1 for e = start + 1 .. end: non-decreasing in e.
            batch_work = (size_sum[start + 1 : end + 1] - size_sum[start]) * longest[start:end]
            rows = max(int(np.searchsorted(batch_work, work, side="right")), min_rows, 1)
            batches.append(order[start : start + rows])
            start += rows
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def ordered_batches(n: int, batch_size: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Indices 0 .. n - 1 in a random order drawn from ``rng`` (in their own order when ``rng``
    is None) cut into consecutive batches of ``batch_size`` (the last may be short): the
    batches of a plain ``DataLoader(batch_size, shuffle=rng is not None)``, whatever the lengths.

    Shapes: -> batches of indices into the n instances.
    """
    order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass(frozen=True)
class BatchPlan:
    """Which batches of an epoch a process runs.

    Every rank draws the same seeded :func:`length_batches` plan of ``batch_size`` batches
    (bounded by ``work`` when the epoch is given the rows' ``sizes``; every batch then still
    holds at least ``world_size`` rows) and runs rows ``rank, rank + world_size, ...`` of each (rows are in length order, so every
    slice has the same mix of lengths and the ranks finish a step together). Every rank does
    one step per plan batch (a DDP step is collective: a rank with one step more would hang),
    and every row of the epoch is run exactly once by one rank. A plan batch with fewer rows
    than ranks (the plan's one short batch) is joined to the batch before it in plan order.
    ``world_size`` 1 is the single-process run: every batch, in plan order.

    Example, 2 ranks, plan batches [a b c d] [e f g]: rank 0 runs [a c] then [e g], rank 1
    [b d] then [f].

    ``order`` (the engine's ``batch_order``): bucketed, the plan above; shuffled, the instances
    in a permutation drawn from (seed, epoch) cut into batches of ``batch_size``
    (:func:`ordered_batches`; ``work`` must be 0); ordered, the same in the instances' own
    order, the same batches every epoch. Ranks slice these batches alike.
    """

    batch_size: int
    world_size: int = 1
    rank: int = 0
    work: int = 0
    order: str = "bucketed"

    def __post_init__(self) -> None:
        if self.order not in ("bucketed", "shuffled", "ordered"):
            raise ValueError(f"batch order {self.order!r}: bucketed, shuffled or ordered")
        if self.order != "bucketed" and self.work > 0:
            raise ValueError(f"a work bound needs length-bucketed batches (batch order {self.order})")

    def epoch(
        self, lengths: np.ndarray, seed: int, epoch: int, sizes: np.ndarray | None = None
    ) -> list[np.ndarray]:
        rng = np.random.default_rng([seed, epoch])
        if self.order == "bucketed":
            batches = length_batches(lengths, self.batch_size, rng, sizes, self.work, self.world_size)
        else:
            batches = ordered_batches(len(lengths), self.batch_size, rng if self.order == "shuffled" else None)
        if self.world_size == 1:
            return batches
        if self.batch_size < self.world_size or len(lengths) < self.world_size:
            raise UserError(
                f"batch_size {self.batch_size} with {len(lengths)} training instances cannot be "
                f"split over {self.world_size} processes: both must be at least the number of "
                "processes. Raise batch_size or start fewer processes."
            )
        # Only the last chunk of the length order can be short; it joins its predecessor in
        # plan order (its successor when it comes first).
        short = [i for i, b in enumerate(batches) if len(b) < self.world_size]
        if short:
            i = short[0]
            j = i - 1 if i > 0 else 1
            batches[j] = np.concatenate([batches[j], batches[i]])
            del batches[i]
        return [b[self.rank :: self.world_size] for b in batches]


def source_sizes(source: BatchSource) -> np.ndarray | None:
    """The per-instance size by which a batch's work is bounded (``batch_work``), for sources
    that declare one (``sizes`` [n], e.g. DNNTSP's nodes per user); None otherwise."""
    sizes = getattr(source, "sizes", None)
    return None if sizes is None else np.asarray(sizes)


#: Instances per scoring batch (before the work bound): validation's, and the recommenders'.
SCORE_BATCH = 256


#: A scoring batch holds at most this many training batches' work (``batch_work``): two
#: threads that each score a batch of the longest histories then keep their rows in the cache
#: together. The published splits' scoring batches stay whole under it.
SCORE_WORK_BATCHES = 2


def score_work(config: TrainOptions, batch_size: int = SCORE_BATCH) -> int:
    """The work bound of a scoring batch of ``batch_size`` instances: the training batch's
    ``batch_work`` per instance, up to :data:`SCORE_WORK_BATCHES` training batches' work.
    Validation and scoring batch alike with it, and long histories come in smaller batches, so
    no batch holds most of the work (threads share batches evenly)."""
    return min(config.batch_work * batch_size // config.batch_size, SCORE_WORK_BATCHES * config.batch_work)


@torch.no_grad()
def score_source(
    module: nn.Module,
    source: BatchSource,
    n_items: int,
    device: torch.device,
    batch_size: int = SCORE_BATCH,
    work: int = 0,
) -> np.ndarray:
    """The module's scores of every item for every instance of ``source`` (logits; a ranking
    fusion is applied on top of them by a wrapping recommender). ``work`` > 0 bounds each batch's
    work as in :func:`length_batches` (scores do not depend on the batching).

    Shapes: -> [len(source), n_items] float32.
    """
    module.eval()
    out = np.zeros((len(source), n_items), dtype=np.float32)
    for idx in length_batches(source.lengths, batch_size, None, source_sizes(source), work):
        batch = source.collate(idx, with_targets=False).to(device)
        out[idx] = module(batch).float().cpu().numpy()
    return out
