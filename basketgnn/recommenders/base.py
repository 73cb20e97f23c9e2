"""The interface every recommender implements, baselines and DNNTSP alike.

A recommender is fitted on training instances and then scores every catalogue item for any
instance's history. Only histories are read when scoring (never the target basket), so the same
object serves evaluation and production top-k.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.threads import kept_helpers
from basketgnn.metrics import top_k


@runtime_checkable
class Recommender(Protocol):
    name: str

    def fit(
        self, data: BasketData, train: Instances, validate: Instances | None = None
    ) -> Recommender:
        """Learn from training instances (u, h): baskets 0..h of u are visible.

        ``validate`` instances (history -> target) may be used to choose hyperparameters.
        """
        ...

    def score(self, data: BasketData, instances: Instances) -> np.ndarray:
        """Scores of every item for each instance's history (baskets 0..h-1 of u).

        Shapes: -> [len(instances), data.n_items] float32; higher is better.
        """
        ...

    def params(self) -> dict[str, Any]:
        """Hyperparameters in effect (recorded with results)."""
        ...


def tuning_grid(
    grid: Mapping[str, Sequence[Any]] | None, defaults: Mapping[str, tuple[Any, ...]]
) -> dict[str, tuple[Any, ...]]:
    """A tuned baseline's grid: ``defaults`` with the keys ``grid`` gives replaced, key by key.

    Raises ValueError for a key ``defaults`` does not have.
    """
    unknown = set(grid or {}) - set(defaults)
    if unknown:
        raise ValueError(f"unknown grid keys {sorted(unknown)}; valid keys are {sorted(defaults)}")
    return {key: tuple(grid[key]) if grid and key in grid else v for key, v in defaults.items()}


#: What one chunk's dense scores [chunk, I] float32 may take: a recommender without its own
#: ``rank``, or a configuration whose ``rank`` falls back to ``score``, holds that block.
DENSE_CHUNK_BYTES = 2**27
#: The fewest instances a chunk holds, whatever the catalogue's size.
MIN_CHUNK = 2048


def default_chunk(n_items: int) -> int:
    """Instances per ranking call: as many as :data:`DENSE_CHUNK_BYTES` of dense scores hold,
    at least :data:`MIN_CHUNK`. Each call has a fixed cost (its set-up, and its threads'
    last parts ending one after the other), so fewer, larger calls rank faster."""
    return max(MIN_CHUNK, DENSE_CHUNK_BYTES // (4 * max(int(n_items), 1)))


def rank_items(
    model: Recommender, data: BasketData, instances: Instances, k: int, chunk: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k item indices and their scores for every instance's history, ``chunk`` instances
    per call (default: :func:`default_chunk` of the catalogue; the rows do not depend on it).

    A recommender with its own ``rank(data, instances, k)`` (the neural models: the same
    result from a few candidates per instance) ranks; any other is ranked from ``score``.

    Shapes: -> (items [n, k] int64, scores [n, k] float32).
    """
    chunk = default_chunk(data.n_items) if chunk is None else int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    k = min(k, data.n_items)
    items = np.zeros((len(instances), k), dtype=np.int64)
    scores = np.zeros((len(instances), k), dtype=np.float32)
    rank = getattr(model, "rank", None)
    with kept_helpers():  # the chunks' ranking calls share their helper threads
        for start in range(0, len(instances), chunk):
            sl = slice(start, start + chunk)
            part = Instances(instances.users[sl], instances.n_history[sl])
            if callable(rank):
                items[sl], scores[sl] = rank(data, part, k)
                continue
            s = model.score(data, part)
            idx = top_k(s, k)
            items[sl] = idx
            scores[sl] = np.take_along_axis(s, idx, axis=1)
    return items, scores
