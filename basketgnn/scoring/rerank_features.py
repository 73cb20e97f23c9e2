"""What the re-ranking stage reads about a customer's candidate items: the ranker's own score, TIFU-KNN's parts, and the customer's repeat timing.

For candidate item i of instance (u, h) (u's first h baskets), with n = h baskets, the
features (:data:`FEATURES`, in this order) are:

- ``score``, ``log_rank``: the trained model's score of i and log(1 + i's position in the
  candidates' order, TIFU-KNN's);
- ``tifu``, ``tifu_neighbours``, ``tifu_own`` (each with a ``has_`` flag): TIFU-KNN's kept
  score at its α, at α = 0 (the neighbours' mean alone) and at α = 1 (the customer's own
  decayed vector alone), each divided by the instance's largest (0 outside the kept top);
- ``bought``, ``log_count``, ``share``: whether u bought i in the history, log(1 + c) and c / n
  for c the number of history baskets holding i;
- ``log_since``, ``in_last``, ``in_last3``: log(1 + s) for s the baskets from the last one
  holding i to the end (s = 1: the last basket; never bought: log(1 + n) + 1), and s = 1,
  s <= 3;
- ``log_gap``, ``due``: log(1 + g) for g the mean number of baskets between u's purchases of i
  (c > 1, else 0), and log(1 + s) - log(1 + g) (c > 1, else 0): how overdue the next purchase is;
- ``log_days``, ``log_gap_days``, ``due_days``: the same in days, from the baskets' times (0
  when the data has none): days from the last purchase of i to u's last history basket, the
  mean days between purchases, their log difference;
- ``item_log_baskets``, ``item_repeat_share``, ``item_log_buyers``: over the training
  customers' visible baskets, log(1 + baskets holding i), the share of i's buyers who bought it
  in two baskets or more, log(1 + buyers) (:class:`ItemStats`);
- ``log_baskets``, ``log_basket_size``: log(1 + n) and log of u's mean basket size.

The repeat-timing features are what a whole-history decayed vector (TIFU-KNN's) cannot hold:
when an item was last bought and how regularly, which is how grocery repeats are timed.

Shapes: candidates [n, C] item indices -> features [n, C, F] float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from basketgnn.data.dataset import NO_TIME, BasketData, ranges
from basketgnn.data.split import Instances

FEATURES = (
    "score", "log_rank",
    "tifu", "has_tifu", "tifu_neighbours", "has_tifu_neighbours", "tifu_own", "has_tifu_own",
    "bought", "log_count", "share", "log_since", "in_last", "in_last3", "log_gap", "due",
    "log_days", "log_gap_days", "due_days",
    "item_log_baskets", "item_repeat_share", "item_log_buyers",
    "log_baskets", "log_basket_size",
)  # fmt: skip
#: The α of TIFU's three parts after the combined one: neighbours alone, own history alone.
PART_ALPHAS = (0.0, 1.0)
NS_PER_DAY = 86_400 * 10**9


@dataclass(frozen=True)
class ItemStats:
    """Per-item counts over the training customers' visible baskets (history and target).

    Shapes: log_baskets, repeat_share, log_buyers [I] float32.
    """

    log_baskets: np.ndarray
    repeat_share: np.ndarray
    log_buyers: np.ndarray

    @classmethod
    def of(cls, data: BasketData, train: Instances) -> ItemStats:
        n_items = data.n_items
        visible = data.histories(train.users, np.asarray(train.n_history) + 1)
        items = visible.baskets.values.astype(np.int64)
        per_instance = np.diff(visible.basket_offsets)
        owner = np.repeat(np.repeat(np.arange(len(train), dtype=np.int64), per_instance),
                          np.diff(visible.baskets.offsets))  # fmt: skip
        pairs, count = np.unique(owner * n_items + items, return_counts=True)  # (instance, item)
        item = pairs % n_items
        buyers = np.bincount(item, minlength=n_items).astype(np.float64)
        repeaters = np.bincount(item, weights=(count > 1).astype(np.float64), minlength=n_items)
        return cls(
            np.log1p(np.bincount(items, minlength=n_items)).astype(np.float32),
            (repeaters / np.maximum(buyers, 1.0)).astype(np.float32),
            np.log1p(buyers).astype(np.float32),
        )


@dataclass(frozen=True)
class RepeatStats:
    """Each (instance, item) pair of the instances' histories, sorted by key instance * I + item.

    Shapes: keys, count, since [m] int64; gap, days, gap_days [m] float64; n_baskets,
    basket_size [n] float64.
    """

    keys: np.ndarray
    count: np.ndarray
    since: np.ndarray
    gap: np.ndarray
    days: np.ndarray
    gap_days: np.ndarray
    n_baskets: np.ndarray
    basket_size: np.ndarray

    @classmethod
    def of(cls, data: BasketData, instances: Instances) -> RepeatStats:
        n_items = data.n_items
        n_hist = np.asarray(instances.n_history, dtype=np.int64)  # [n]
        hist = data.histories(instances.users, n_hist)
        sizes = np.diff(hist.baskets.offsets)  # [baskets]
        owner = np.repeat(np.arange(len(n_hist), dtype=np.int64), n_hist)  # [baskets]
        position = ranges(np.zeros(len(n_hist), np.int64), n_hist)  # [baskets] 0 .. h - 1
        times = data.basket_times[data.user_offsets[instances.users][owner] + position]  # [baskets]
        timed = bool(len(times)) and bool((times != NO_TIME).all())
        days = (times - times.min()) / NS_PER_DAY if timed else np.zeros(len(times))  # [baskets]
        keys = np.repeat(owner, sizes) * n_items + hist.baskets.values  # [entries]
        e_pos, e_days = np.repeat(position, sizes), np.repeat(days, sizes)
        # By key, then by basket: the entries come basket by basket, so a stable sort by key.
        order = np.argsort(keys, kind="stable")
        keys, e_pos, e_days = keys[order], e_pos[order], e_days[order]
        uniq, first, count = np.unique(keys, return_index=True, return_counts=True)
        last = first + count - 1
        pair_owner = uniq // n_items
        # Worked example: h = 5, bought in baskets 1 and 3 -> since = 5 - 3 = 2, gap = (3 - 1) / 1.
        steps = np.maximum(count - 1, 1)
        last_day = days[np.cumsum(n_hist) - 1] if len(n_hist) else days  # [n] the last basket's
        basket_items = np.bincount(owner, weights=sizes, minlength=len(n_hist))
        return cls(
            uniq, count, n_hist[pair_owner] - e_pos[last],
            np.where(count > 1, (e_pos[last] - e_pos[first]) / steps, 0.0),
            last_day[pair_owner] - e_days[last],
            np.where(count > 1, (e_days[last] - e_days[first]) / steps, 0.0),
            n_hist.astype(np.float64), basket_items / np.maximum(n_hist, 1),
        )  # fmt: skip


def lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` at each wanted key of the sorted ``keys`` (0 where absent) and whether found.
    Shapes: keys, values [m]; wanted [q] -> ([q], [q] bool)."""
    if len(keys) == 0:
        return np.zeros(len(wanted), values.dtype), np.zeros(len(wanted), bool)
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = keys[pos] == wanted
    return np.where(found, values[pos], 0), found


def lookup_all(
    keys: np.ndarray, columns: tuple[np.ndarray, ...], wanted: np.ndarray
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """:func:`lookup` of several value columns of the same sorted keys, searching once."""
    if len(keys) == 0:
        return tuple(np.zeros(len(wanted), c.dtype) for c in columns), np.zeros(len(wanted), bool)
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = keys[pos] == wanted
    return tuple(np.where(found, c[pos], 0) for c in columns), found


def candidate_features(
    data: BasketData,
    instances: Instances,
    items: np.ndarray,
    scores: np.ndarray,
    tifu: tuple,
    item_stats: ItemStats,
) -> np.ndarray:
    """The :data:`FEATURES` of each instance's candidates (module docstring).

    Args:
        items, scores: the candidates in TIFU-KNN's order and the trained model's scores of them.
        tifu: TIFU-KNN's kept scores (SparseScores of the instances) at its α, at α = 0 and at
            α = 1, each row divided by its largest.

    Shapes: items, scores [n, C] -> [n, C, len(FEATURES)] float32.
    """
    n, c = items.shape
    n_items = data.n_items
    row = np.repeat(np.arange(n, dtype=np.int64), c)  # [n * C]
    item = items.reshape(-1).astype(np.int64)
    wanted = row * n_items + item
    columns: list[np.ndarray] = [scores.reshape(-1), np.log1p(np.tile(np.arange(c), n))]
    for part in tifu:
        part_keys = np.repeat(np.arange(len(part), dtype=np.int64), np.diff(part.offsets)) * n_items + part.items
        value, found = lookup(part_keys, np.asarray(part.values, np.float64), wanted)  # rows sorted, items ascending
        columns += [value, found]
    rs = RepeatStats.of(data, instances)
    (count, since, gap, days, gap_days), bought = lookup_all(rs.keys, (rs.count, rs.since, rs.gap, rs.days, rs.gap_days), wanted)
    n_baskets = rs.n_baskets[row]
    repeated = count > 1
    log_since = np.where(bought, np.log1p(since), np.log1p(n_baskets) + 1.0)
    columns += [
        bought, np.log1p(count), count / n_baskets, log_since, bought & (since == 1), bought & (since <= 3),
        np.log1p(gap), np.where(repeated, log_since - np.log1p(gap), 0.0),
        np.where(bought, np.log1p(days), 0.0), np.log1p(gap_days),
        np.where(repeated, np.log1p(days) - np.log1p(gap_days), 0.0),
        item_stats.log_baskets[item], item_stats.repeat_share[item], item_stats.log_buyers[item],
        np.log1p(n_baskets), np.log(np.maximum(rs.basket_size[row], 1.0)),
    ]  # fmt: skip
    out = np.stack([np.asarray(col, dtype=np.float32) for col in columns], axis=1)  # [n * C, F]
    return out.reshape(n, c, len(FEATURES))
