"""Compiled merge of sparse score rows (numba): :func:`weighted_union`, the two-part step of
:meth:`~basketgnn.scoring.sparse.SparseScores.weighted_sum`. It releases the GIL (``nogil``).

Shapes in this module: n rows.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def weighted_union(a_ptr, a_items, a_values, a_weight, b_ptr, b_items, b_values, b_weight):  # pragma: no cover - jit
    """Row by row, (0 + w_a · a) + w_b · b on the union of the rows' items (ascending; a
    missing entry is 0): ``SparseScores.weighted_sum`` of two parts.

    Shapes: a_*, b_* CSR of n rows (items ascending) -> (offsets [n + 1], items [≥ nnz],
    values [≥ nnz]): buffers of len(a) + len(b) entries, the first offsets[-1] used.
    """
    n = len(a_ptr) - 1
    offsets = np.zeros(n + 1, np.int64)
    items = np.empty(len(a_items) + len(b_items), np.int64)
    values = np.empty(len(a_items) + len(b_items))
    m = 0
    for u in range(n):
        x, x_end, y, y_end = a_ptr[u], a_ptr[u + 1], b_ptr[u], b_ptr[u + 1]
        while x < x_end or y < y_end:
            if y == y_end or (x < x_end and a_items[x] < b_items[y]):
                items[m] = a_items[x]
                values[m] = (0.0 + a_weight * a_values[x]) + b_weight * 0.0
                x += 1
            elif x == x_end or b_items[y] < a_items[x]:
                items[m] = b_items[y]
                values[m] = (0.0 + a_weight * 0.0) + b_weight * b_values[y]
                y += 1
            else:
                items[m] = a_items[x]
                values[m] = (0.0 + a_weight * a_values[x]) + b_weight * b_values[y]
                x += 1
                y += 1
            m += 1
        offsets[u + 1] = m
    return offsets, items, values
