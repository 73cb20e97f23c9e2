"""Compiled pieces of :meth:`basketgnn.graph.cooccurrence.UserGraphs.collate` (numba): stable
counting sorts of small non-negative integer keys in place of NumPy's comparison sorts, with
the same outputs element for element (the tests compare them with ``np.argsort(kind="stable")``
and ``np.unique``). A batch's keys are node ids and item ids, bounded by the batch's nodes and
the catalogue, so a count per key costs less than sorting.

Shapes: n keys.
"""

from __future__ import annotations

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def _place(keys, order_in, n_keys, order_out):  # pragma: no cover - jit
    """order_out = order_in stably reordered by keys[order_in] (a counting sort)."""
    start = np.zeros(n_keys + 1, np.int64)
    for i in order_in:
        start[keys[i] + 1] += 1
    for k in range(n_keys):
        start[k + 1] += start[k]
    for i in order_in:
        k = keys[i]
        order_out[start[k]] = i
        start[k] += 1


@numba.njit(**_JIT)
def stable_order(keys, n_keys):  # pragma: no cover - jit
    """``np.argsort(keys, kind="stable")`` for keys in [0, n_keys).

    Shapes: keys [n] int64 -> [n] int64."""
    out = np.empty(len(keys), np.int64)
    _place(keys, np.arange(len(keys)), n_keys, out)
    return out


@numba.njit(**_JIT)
def unique_pairs(major, minor, n_major, n_minor):  # pragma: no cover - jit
    """``np.unique(major * n_minor + minor, return_index=True, return_inverse=True)[1:]`` for
    major in [0, n_major) and minor in [0, n_minor): the first position of each distinct
    (major, minor), in ascending (major, minor) order, and each position's distinct pair.
    Two stable counting sorts (by minor, then by major) order the positions by (major, minor),
    equal pairs by position, so each pair's first position leads its run.

    Shapes: major, minor [n] int64 -> (first [U] int64, inverse [n] int64)."""
    n = len(major)
    by_minor = np.empty(n, np.int64)
    _place(minor, np.arange(n), n_minor, by_minor)
    order = np.empty(n, np.int64)
    _place(major, by_minor, n_major, order)
    first = np.empty(n, np.int64)
    inverse = np.empty(n, np.int64)
    u = 0
    for j in range(n):
        i = order[j]
        if j == 0 or major[i] != major[order[j - 1]] or minor[i] != minor[order[j - 1]]:
            first[u] = i
            u += 1
        inverse[i] = u - 1
    return first[:u], inverse
