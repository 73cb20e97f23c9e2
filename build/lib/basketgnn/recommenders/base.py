"""The interface every recommender implements, baselines and DNNTSP alike.

A recommender is fitted on training instances and then scores every catalogue item for any
instance's history. Only histories are read when scoring (never the target basket), so the same
object serves evaluation and production top-k.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances


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
