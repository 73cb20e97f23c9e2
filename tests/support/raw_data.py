"""Test data exactly as listed (``from_sequences`` de-duplicates and sorts each basket)."""

from __future__ import annotations

import numpy as np

from basketgnn.data.dataset import NO_TIME, BasketData, _offsets


def raw_basket_data(sequences: list[list[list[int]]], n_items: int) -> BasketData:
    """BasketData of users -> baskets -> items, repeats inside a basket kept, order kept."""
    baskets = [b for user in sequences for b in user]
    return BasketData(
        items=np.asarray([i for b in baskets for i in b], dtype=np.int32),
        basket_offsets=_offsets(np.asarray([len(b) for b in baskets], dtype=np.int64)),
        user_offsets=_offsets(np.asarray([len(u) for u in sequences], dtype=np.int64)),
        basket_times=np.full(len(baskets), NO_TIME, dtype=np.int64),
        user_ids=np.asarray([str(u) for u in range(len(sequences))]),
        item_ids=np.asarray([str(i) for i in range(n_items)]),
        user_part=np.full(len(sequences), -1, dtype=np.int8),
    )
