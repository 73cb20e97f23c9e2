"""What the re-ranking stage reads about a customer's candidate items: the ranker's own score, TIFU-KNN's parts, and the customer's repeat timing.

For candidate item i of instance (u, h) (u's first h baskets), with n = h baskets, the
features (:data:`FEATURES`, in this order) are:

- ``score``, ``log_rank``: the trained model's score of i and log(1 + i's position in the
  candidates' order, TIFU-KNN's);
- ``tifu``, ``tifu_neighbours``, ``tifu_own`` (each with a ``has_`` flag): TIFU-KNN's kept
  score at its α, at α = 0 (the neighbours' mean alone) and at α = 1 (the customer's own
  decayed vector alone), each divided by the instance's largest (0 outside the kept top);
- ``bought``, ``log_count``, ``share``: whether u bought i in the history, log(1 + c) and c / n
  for c the number of history baskets holding i (0 for an empty history);
- ``log_since``, ``in_last``, ``in_last3``: log(1 + s) for s the baskets from the last one
  holding i to the end (s = 1: the last basket; never bought: log(1 + n) + 1), and s = 1,
  s <= 3;
- ``log_gap``, ``due``: log(1 + g) for g the mean number of baskets between u's purchases of i
  (c > 1, else 0), and log(1 + s) - log(1 + g) (c > 1, else 0): how overdue the next purchase is;
- ``log_days``, ``log_gap_days``, ``due_days``: the same in days, from the baskets' times (0
  when a basket of u's history has none): days from the last purchase of i to u's last history
  basket, the mean days between purchases, their log difference. A basket's day is counted
  from u's last history basket, so a customer's features do not depend on the others scored
  with it;
- ``item_log_baskets``, ``item_repeat_share``, ``item_log_buyers``: over the training
  customers' visible baskets, log(1 + baskets holding i), the share of i's buyers who bought it
  in two baskets or more, log(1 + buyers) (:class:`ItemStats`);
- ``log_baskets``, ``log_basket_size``: log(1 + n) and log of u's mean basket size;
- with the pool's item pairs (:class:`~basketgnn.scoring.item_pairs.ItemPairs`), two more
  last: ``item_pairs_sum``, ``item_pairs_max``, how strongly the pool buys i with u's history
  items.

The repeat-timing features are what a whole-history decayed vector (TIFU-KNN's) cannot hold:
when an item was last bought and how regularly, which is how grocery repeats are timed.

The columns are computed by a compiled pass over each customer's TIFU-KNN rows and history
(:mod:`~basketgnn.scoring.rerank_features_kernel`); the tests check them against these
formulas customer by customer.

Shapes: candidates [n, C] item indices -> features [n, C, F] float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from basketgnn.data.dataset import NO_TIME, BasketData, ranges
from basketgnn.data.split import Instances
from basketgnn.scoring.item_pairs import PAIR_FEATURES, ItemPairs
from basketgnn.scoring.rerank_features_kernel import candidate_columns

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


def feature_names(pairs: ItemPairs | None) -> tuple[str, ...]:
    """The columns :func:`candidate_features` writes: :data:`FEATURES`, then the pair columns
    when there are pairs."""
    return FEATURES + (PAIR_FEATURES if pairs is not None else ())


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


def candidate_features(
    data: BasketData,
    instances: Instances,
    items: np.ndarray,
    scores: np.ndarray,
    tifu: tuple,
    item_stats: ItemStats,
    pairs: ItemPairs | None = None,
) -> np.ndarray:
    """The :func:`feature_names` columns of each instance's candidates (module docstring).

    Args:
        items, scores: the candidates in TIFU-KNN's order and the trained model's scores of them.
        tifu: TIFU-KNN's kept scores (SparseScores of the instances) at its α, at α = 0 and at
            α = 1, each row divided by its largest.
        pairs: the pool's item pairs, or None for :data:`FEATURES` alone.

    Shapes: items, scores [n, C] -> [n, C, len(feature_names(pairs))] float32.
    """
    n, c = items.shape
    if items.size and items.min() < 0:
        raise ValueError("candidate_features needs item indices, not the -1 of an unfilled place")
    n_hist = np.asarray(instances.n_history, dtype=np.int64)  # [n]
    hist = data.histories(instances.users, n_hist)
    owner = np.repeat(np.arange(n, dtype=np.int64), n_hist)  # [B]
    times = data.basket_times[data.user_offsets[instances.users][owner] + ranges(np.zeros(n, np.int64), n_hist)]
    stacked = [np.asarray(part.offsets, np.int64) for part in tifu]
    bases = np.cumsum([0] + [int(o[-1]) for o in stacked[:-1]])
    part_offsets = np.concatenate([stacked[0]] + [o[1:] + b for o, b in zip(stacked[1:], bases[1:])])  # [3n + 1]
    out = np.empty((n, c, len(feature_names(pairs))), np.float32)
    candidate_columns(
        np.ascontiguousarray(items, dtype=np.int64), np.ascontiguousarray(scores, dtype=np.float32), part_offsets,
        np.concatenate([np.asarray(part.items, np.int64) for part in tifu]),
        np.concatenate([np.asarray(part.values, np.float64) for part in tifu]),
        hist.basket_offsets.astype(np.int64), hist.baskets.offsets.astype(np.int64),
        hist.baskets.values.astype(np.int64), np.asarray(times, np.int64), NO_TIME, float(NS_PER_DAY),
        np.stack([item_stats.log_baskets, item_stats.repeat_share, item_stats.log_buyers]).astype(np.float32),
        data.n_items, out,
    )  # fmt: skip
    if pairs is not None:
        pairs.columns(data, instances, hist, items, out, len(FEATURES))
    return out
