"""Small basket logs with a planted signal that a personal model can learn."""

from __future__ import annotations

import numpy as np

from basketgnn.data.dataset import BasketData, from_sequences


def planted_data(n_users: int = 240, n_items: int = 60, seed: int = 0) -> BasketData:
    """Each user re-buys their own 3 favourites (one per basket, cycling) plus a popular item.

    A global popularity ranking cannot know the favourites; a personal model can.
    """
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n_users):
        fav = rng.choice(np.arange(5, n_items), size=3, replace=False)
        T = int(rng.integers(4, 9))
        seqs.append([[int(fav[t % 3]), int(rng.integers(0, 5))] for t in range(T)])
    return from_sequences(seqs, n_items=n_items)
