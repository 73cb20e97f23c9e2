"""Sparse score rows: :class:`SparseScores`, each instance's kept scores (TIFU-KNN's, the
item-transition score, the fusion's addend) as CSR rows with ascending
items, and their weighted sum on the union of the rows' items
(:func:`~basketgnn.scoring.sparse_kernel.weighted_union`, compiled).

Shapes in this module: n instances (c in a block), I items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from basketgnn.data.dataset import _offsets
from basketgnn.metrics import top_k
from basketgnn.scoring.sparse_kernel import weighted_union


@dataclass(frozen=True)
class SparseScores:
    """Each instance's kept scores as CSR rows (TIFU, item-transition or neighbour scores).

    Shapes: offsets [n + 1] int64; items [nnz] int64 (ascending in a row); values [nnz] float.
    """

    offsets: np.ndarray
    items: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self, start: int, stop: int) -> SparseScores:
        """Instances start..stop-1 as their own SparseScores."""
        lo, hi = self.offsets[start], self.offsets[stop]
        return SparseScores(self.offsets[start : stop + 1] - lo, self.items[lo:hi], self.values[lo:hi])

    @classmethod
    def top_scaled(cls, x: np.ndarray, top: int, dtype: type = np.float32) -> SparseScores:
        """Each row's ``top`` largest positive entries (ties to the lower item, as
        ``metrics.top_k`` ranks them) divided by the row's largest entry, so in (0, 1].
        Shapes: x [c, I] -> c rows."""
        c, n_items = x.shape
        if top >= n_items:
            keep = x > 0  # [c, I]
            peak = x.max(axis=1) if n_items else np.zeros(c, x.dtype)  # [c]
            r, i = np.nonzero(keep)  # row-major: each row's items ascending
            values = x[r, i].astype(dtype) / peak[r].astype(dtype)
            return cls(_offsets(np.bincount(r, minlength=c)), i.astype(np.int64), values)
        cols = np.sort(top_k(x, top), axis=1)  # [c, top] the kept items, ascending
        kept = np.take_along_axis(x, cols, axis=1)  # [c, top]
        peak = kept.max(axis=1)  # [c] the row's largest entry is always kept
        r, j = np.nonzero(kept > 0)
        values = kept[r, j].astype(dtype) / peak[r].astype(dtype)
        return cls(_offsets(np.bincount(r, minlength=c)), cols[r, j].astype(np.int64), values)

    @classmethod
    def from_buffers(cls, offsets: np.ndarray, items: np.ndarray, values: np.ndarray) -> SparseScores:
        """Rows written into buffers longer than needed (a kernel's output): their used part,
        copied when under half of the buffer is used. Shapes: offsets [n + 1] -> n rows."""
        nnz = int(offsets[-1])
        if 2 * nnz < len(items):
            return cls(offsets, items[:nnz].copy(), values[:nnz].copy())
        return cls(offsets, items[:nnz], values[:nnz])

    @classmethod
    def concat(cls, parts: Sequence[SparseScores]) -> SparseScores:
        """Consecutive blocks of rows as one."""
        if not parts:
            return cls(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
        lengths = np.concatenate([np.diff(p.offsets) for p in parts])
        return cls(
            _offsets(lengths),
            np.concatenate([p.items for p in parts]),
            np.concatenate([p.values for p in parts]),
        )

    def scaled(self, weight: float) -> SparseScores:
        """weight · self (the same rows and items). Shapes: n rows -> n rows."""
        return SparseScores(self.offsets, self.items, weight * self.values)

    @classmethod
    def weighted_sum(cls, parts: Sequence[tuple[float, SparseScores]]) -> SparseScores:
        """Σ weight · scores over ``parts`` (rows of the same instances), on the union of each
        row's items, ascending: for two parts (0 + w_a · a) + w_b · b with a missing entry 0
        (``sparse_kernel.weighted_union``), so an item kept by one part only gets that part's weighted
        value exactly; more parts are added one at a time (with weight 1 on the running sum,
        the same float operations as summing them in ``parts``' order).

        Shapes: parts of n rows each -> n rows.
        """
        if any(len(p) != len(parts[0][1]) for _, p in parts):
            raise ValueError("weighted_sum needs parts with the same rows")
        if len(parts) == 1:
            return parts[0][1].scaled(parts[0][0])
        (wa, total), rest = parts[0], parts[1:]
        for wb, b in rest:
            total = cls.from_buffers(*weighted_union(
                total.offsets, total.items, total.values, float(wa), b.offsets, b.items, b.values, float(wb)
            ))  # fmt: skip
            wa = 1.0
        return total

    def add_to(self, dense: np.ndarray, weight: float) -> np.ndarray:
        """dense + weight · self, in place. Shapes: dense [n, I] -> [n, I]."""
        rows = np.repeat(np.arange(len(self)), np.diff(self.offsets))
        dense[rows, self.items] += weight * self.values  # (row, item) pairs are distinct
        return dense
