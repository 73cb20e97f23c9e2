"""The re-ranking stage's compiled passes (numba): its candidate features, one pass over each
customer's TIFU-KNN rows and history baskets into item-indexed scratch, then one read per
candidate (:func:`candidate_columns`); and the trained model's scores in shared form read at the
candidates (:func:`shared_values_at`).

:func:`candidate_columns` writes the columns of
:data:`~basketgnn.scoring.rerank_features.FEATURES` in that order, each computed in float64
with the same operations as the formulas in :mod:`~basketgnn.scoring.rerank_features` (and
rounded once to float32), with no sort or search over the customers' (item, value) pairs.
The scratch arrays are cleared entry by entry after each customer, so the work is linear in
the rows' and histories' lengths plus the candidates. It releases the GIL (``nogil``).

Shapes in this module: n instances, C candidates, I items, F features, B history baskets.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from basketgnn.jit import jit_options

_JIT = jit_options(__file__)


@numba.njit(**_JIT)
def candidate_columns(
    items, scores, part_offsets, part_items, part_values, instance_baskets, basket_offsets,
    basket_items, times, no_time, per_day, item_columns, n_items, out,
):  # pragma: no cover - jit
    """Fill out [n, C, F] with the features of each instance's candidates.

    Args:
        items, scores: the candidates and the trained model's scores of them, [n, C].
        part_offsets, part_items, part_values: TIFU-KNN's three parts (α, α = 0, α = 1) as CSR
            rows stacked part after part: part p's row r is row p · n + r, [3n + 1], [nnz],
            [nnz] float64.
        instance_baskets: each instance's history baskets, [n + 1] offsets into the baskets.
        basket_offsets, basket_items: the history baskets as CSR, [B + 1], [entries].
        times: each basket's time, ``no_time`` where it has none, [B] int64; ``per_day``: time
            units in a day. A basket's day is (its time − the history's last) / ``per_day``; a
            history with a basket without time has 0 for every day-based column.
        item_columns: the item statistics ``item_log_baskets``, ``item_repeat_share``,
            ``item_log_buyers``, [3, I] float32.
    """
    n, c = items.shape
    part_value = np.zeros((3, n_items), np.float64)
    part_hit = np.zeros((3, n_items), np.bool_)
    count = np.zeros(n_items, np.int64)
    first = np.zeros(n_items, np.int64)  # the history position of the first basket holding i
    last = np.zeros(n_items, np.int64)
    for r in range(n):
        for p in range(3):
            for e in range(part_offsets[p * n + r], part_offsets[p * n + r + 1]):
                part_value[p, part_items[e]] = part_values[e]
                part_hit[p, part_items[e]] = True
        b0, b1 = instance_baskets[r], instance_baskets[r + 1]
        h = b1 - b0
        n_entries = basket_offsets[b1] - basket_offsets[b0]
        for b in range(b0, b1):
            for e in range(basket_offsets[b], basket_offsets[b + 1]):
                i = basket_items[e]
                if count[i] == 0:
                    first[i] = b - b0
                count[i] += 1
                last[i] = b - b0
        n_baskets = float(h)
        log_baskets = math.log1p(n_baskets)
        log_basket_size = math.log(max(n_entries / max(h, 1), 1.0))
        timed = h > 0
        for b in range(b0, b1):
            timed = timed and times[b] != no_time
        for j in range(c):
            i = items[r, j]
            o = out[r, j]
            o[0] = scores[r, j]
            o[1] = math.log1p(float(j))
            for p in range(3):
                o[2 + 2 * p] = part_value[p, i] if part_hit[p, i] else 0.0
                o[3 + 2 * p] = 1.0 if part_hit[p, i] else 0.0
            cnt = count[i]
            bought = cnt > 0
            repeated = cnt > 1
            since = h - last[i] if bought else 0
            steps = max(cnt - 1, 1)
            gap = (last[i] - first[i]) / steps if repeated else 0.0
            d, gap_d = 0.0, 0.0
            if timed and bought:
                day_last = (times[b0 + last[i]] - times[b1 - 1]) / per_day  # ≤ 0
                d = -day_last
                if repeated:
                    gap_d = (day_last - (times[b0 + first[i]] - times[b1 - 1]) / per_day) / steps
            log_since = math.log1p(since) if bought else log_baskets + 1.0
            o[8] = 1.0 if bought else 0.0
            o[9] = math.log1p(float(cnt))
            o[10] = cnt / n_baskets if h > 0 else 0.0
            o[11] = log_since
            o[12] = 1.0 if bought and since == 1 else 0.0
            o[13] = 1.0 if bought and since <= 3 else 0.0
            o[14] = math.log1p(gap)
            o[15] = log_since - math.log1p(gap) if repeated else 0.0
            o[16] = math.log1p(d)
            o[17] = math.log1p(gap_d)
            o[18] = math.log1p(d) - math.log1p(gap_d) if repeated else 0.0
            o[19] = item_columns[0, i]
            o[20] = item_columns[1, i]
            o[21] = item_columns[2, i]
            o[22] = log_baskets
            o[23] = log_basket_size
        for p in range(3):
            for e in range(part_offsets[p * n + r], part_offsets[p * n + r + 1]):
                part_hit[p, part_items[e]] = False
        for e in range(basket_offsets[b0], basket_offsets[b1]):
            count[basket_items[e]] = 0


@numba.njit(**_JIT)
def shared_values_at(offsets, items, values, base, candidates):  # pragma: no cover - jit
    """Scores in shared form (one row ``base`` for everyone, each row's own ``items`` /
    ``values``) read at each row's candidates: the row's own value where it has one, else the
    shared row's.

    Shapes: offsets [n + 1]; items [nnz] int64 (distinct within a row); values [nnz] float32;
    base [I] float32; candidates [n, C] int64 -> [n, C] float32.
    """
    n, c = candidates.shape
    out = np.empty((n, c), np.float32)
    own = np.zeros(len(base), np.float32)
    has = np.zeros(len(base), np.bool_)
    for r in range(n):
        for e in range(offsets[r], offsets[r + 1]):
            own[items[e]] = values[e]
            has[items[e]] = True
        for j in range(c):
            i = candidates[r, j]
            out[r, j] = own[i] if has[i] else base[i]
        for e in range(offsets[r], offsets[r + 1]):
            has[items[e]] = False
    return out
