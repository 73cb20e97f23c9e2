"""Basket sequences as padded tensors: the input of the sequential models (SASRec, BERT4Rec, DIN).

An instance (u, h) reads user u's history baskets 0..h-1; the sequence kept is its last
``max_len`` baskets, oldest first (left-aligned, padding after the real steps: the one padding
convention of :mod:`basketgnn.nn.masks`). Every basket becomes a row of item slots holding
``item index + 1`` (0 = padding), so an ``nn.Embedding(n_items + 1, d, padding_idx=0)`` reads it.

Worked example: u's baskets {3, 5}, {5}, {1, 2, 4}; instance (u, h=3), max_len 2, cap 2 ->
steps {5}, {1, 2, 4} -> items [[6, 0], [2, 3]] (the third item of the last basket is over the cap),
basket_mask [True, True], lengths 2.

Items per basket are capped at ``max_basket_items`` (default 32): the slot dimension L of a batch
is the largest kept basket of that batch, so one rare 90-item basket (TaFeng's largest) would
otherwise widen every basket of its batch to 90 slots. 32 keeps every item of more than 99% of
the baskets of DC (max 9) and TaFeng (99th percentile 25). A longer basket keeps its first
``max_basket_items`` entries in stored order (deterministic; the rest are not seen by the model).

Batches are built with numpy over the CSR arrays of :class:`BasketData` (no loop over users).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from basketgnn.data.dataset import BasketData, ranges
from basketgnn.data.split import Instances
from basketgnn.nn.masks import length_mask

DEFAULT_MAX_BASKET_ITEMS = 32


@dataclass(frozen=True)
class SequenceBatch:
    """A batch of B instances.

    Shapes: items [B, T, L] int64 (item index + 1, 0 = padding), basket_mask [B, T] bool
    (True = real basket), lengths [B] int64 (number of real baskets, >= 1),
    target_items [nnz] int64 / target_offsets [B + 1] int64 (CSR of the target baskets,
    catalogue indices) or None.
    """

    items: torch.Tensor
    basket_mask: torch.Tensor
    lengths: torch.Tensor
    target_items: torch.Tensor | None = None
    target_offsets: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> SequenceBatch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return replace(
            self,
            items=self.items.to(device),
            basket_mask=self.basket_mask.to(device),
            lengths=self.lengths.to(device),
            target_items=move(self.target_items),
            target_offsets=move(self.target_offsets),
        )

    def __len__(self) -> int:
        return int(self.items.shape[0])


class SequenceSource:
    """The sequences of a set of instances, collated on demand (implements ``BatchSource``).

    Args:
        data: the prepared baskets.
        instances: (user, history length) pairs.
        max_len: keep at most this many most recent history baskets.
        max_basket_items: keep at most this many items of each basket.
    """

    def __init__(
        self,
        data: BasketData,
        instances: Instances,
        max_len: int,
        max_basket_items: int = DEFAULT_MAX_BASKET_ITEMS,
    ) -> None:
        if max_len < 1 or max_basket_items < 1:
            raise ValueError(f"max_len ({max_len}) and max_basket_items ({max_basket_items}) must be >= 1")
        self.data = data
        self.users = np.asarray(instances.users, dtype=np.int64)
        self.n_history = np.asarray(instances.n_history, dtype=np.int64)
        self.max_len = max_len
        self.max_basket_items = max_basket_items
        self._lengths = np.minimum(self.n_history, max_len)

    @property
    def lengths(self) -> np.ndarray:
        """Number of sequence steps of every instance. Shape [n]."""
        return self._lengths

    def __len__(self) -> int:
        return len(self.users)

    def collate(self, idx: np.ndarray, with_targets: bool = True) -> SequenceBatch:
        """The instances ``idx`` as one padded batch. Shapes: idx [B] -> SequenceBatch of B."""
        idx = np.asarray(idx, dtype=np.int64)
        data = self.data
        users, h, T_b = self.users[idx], self.n_history[idx], self._lengths[idx]  # [B] each
        B = len(idx)
        # Global basket index of every kept step, batch row by row: the last T_b of 0..h-1.
        first = data.user_offsets[users] + h - T_b  # [B]
        basket = ranges(first, T_b)  # [S], S = sum(T_b)
        row = np.repeat(np.arange(B), T_b)  # [S]
        step = np.arange(len(basket)) - np.repeat(np.cumsum(T_b) - T_b, T_b)  # [S]
        size = np.minimum(data.basket_offsets[basket + 1] - data.basket_offsets[basket], self.max_basket_items)
        T = int(T_b.max()) if B else 1
        L = max(int(size.max()) if len(size) else 1, 1)
        # Every kept entry: its basket's row/step, and its slot inside the basket.
        entry = ranges(data.basket_offsets[basket], size)  # [E]
        slot = np.arange(len(entry)) - np.repeat(np.cumsum(size) - size, size)  # [E]
        items = np.zeros((B, T, L), dtype=np.int64)
        items[np.repeat(row, size), np.repeat(step, size), slot] = data.items[entry].astype(np.int64) + 1
        lengths = torch.from_numpy(T_b.copy())
        batch = SequenceBatch(
            items=torch.from_numpy(items),
            basket_mask=length_mask(lengths, T),
            lengths=lengths,
        )
        if not with_targets:
            return batch
        targets = data.targets(users, h)
        return replace(
            batch,
            target_items=torch.from_numpy(targets.values.astype(np.int64)),
            target_offsets=torch.from_numpy(targets.offsets.astype(np.int64)),
        )


def sequence_batches(
    data: BasketData,
    instances: Instances,
    max_len: int,
    max_basket_items: int = DEFAULT_MAX_BASKET_ITEMS,
) -> SequenceSource:
    """The ``BatchSource`` of the sequential models; see :class:`SequenceSource`."""
    return SequenceSource(data, instances, max_len, max_basket_items)
