"""The generator's steps per customer and basket, in the order :func:`basketgnn.data.synth.generate_log`
draws them from the customer stream: how many baskets (:func:`basket_counts`), when
(:func:`basket_times`), and what is in them (:func:`basket_items`: favourites at their rhythm,
background picks, bundle mates). Each step draws whole arrays, so the same stream state gives
the same log."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from basketgnn.data.synth.items import ItemStructure, popularity_picks
from basketgnn.data.synth.knobs import Knobs

# Favourites are drawn from popularity ** 0.5 so that they are not just the global best sellers:
# re-buying must carry information that a popularity model does not already have.
_FAVOURITE_FLATTEN = 0.5
# Spread (log-normal sigma) of customers' personal mean gap between baskets.
_GAP_SPREAD = 0.5
# Preferred shopping hour is uniform in [8, 20); the actual time is within +- 1 h (sd) of it,
# clipped to opening hours 07:00-22:00, which keeps consecutive days' baskets in order.
_OPEN_MINUTE, _CLOSE_MINUTE = 7 * 60, 22 * 60


@dataclass(frozen=True)
class Baskets:
    """Every basket of the log, customer by customer, in time order.

    Shapes: n_baskets [n_customers]; user_start [n_customers + 1] (customer u's baskets are
    ``user_start[u] .. user_start[u + 1] - 1``); basket_user, basket_seq [B] (each basket's
    customer and its number within the customer's history).
    """

    n_baskets: np.ndarray
    user_start: np.ndarray
    basket_user: np.ndarray
    basket_seq: np.ndarray

    @classmethod
    def of(cls, n_baskets: np.ndarray) -> Baskets:
        """The baskets of customers with ``n_baskets`` baskets each."""
        n_customers = len(n_baskets)
        user_start = np.zeros(n_customers + 1, dtype=np.int64)
        np.cumsum(n_baskets, out=user_start[1:])
        basket_user = np.repeat(np.arange(n_customers, dtype=np.int64), n_baskets)  # [B]
        basket_seq = np.arange(len(basket_user), dtype=np.int64) - user_start[basket_user]
        return cls(n_baskets, user_start, basket_user, basket_seq)

    def __len__(self) -> int:
        return len(self.basket_user)


def basket_counts(
    rng: np.random.Generator,
    n_customers: int,
    mean_baskets: float,
    max_baskets: int,
    history_spread: float,
) -> np.ndarray:
    """Each customer's number of baskets: ``1 + Geometric`` clipped to ``[2, max_baskets]``, or
    with ``history_spread`` > 0 a rounded log-normal clipped to ``[1, max_baskets]``.
    Shape [n_customers] int64."""
    if history_spread > 0:
        raw = rng.lognormal(np.log(mean_baskets) - 0.5 * history_spread**2, history_spread, n_customers)
        return np.clip(np.rint(raw), 1, max_baskets).astype(np.int64)
    n_baskets = 1 + rng.geometric(1.0 / (mean_baskets - 1.0), size=n_customers)
    return np.clip(n_baskets, 2, max_baskets).astype(np.int64)


def basket_times(
    rng: np.random.Generator,
    baskets: Baskets,
    mean_gap_days: float,
    gap_regularity: float,
    span_days: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Day number and minute of day of every basket.

    Shapes: -> day [B] int64, minute [B] int64. Days strictly increase within a customer.
    """
    n_baskets, basket_user, basket_seq = baskets.n_baskets, baskets.basket_user, baskets.basket_seq
    n_customers = len(n_baskets)
    # Log-normal with mean 1, so mean_gap_days stays the mean over customers.
    personal_gap = mean_gap_days * rng.lognormal(
        -0.5 * _GAP_SPREAD**2, _GAP_SPREAD, size=n_customers
    )
    # Frequent shoppers shop more often: capping the mean gap at span_days / n_baskets keeps the
    # expected history inside the span, so the log covers about span_days, not the longest tail.
    personal_gap = np.minimum(personal_gap, span_days / n_baskets)
    scale = personal_gap[basket_user] / gap_regularity
    gap = np.maximum(np.rint(rng.gamma(gap_regularity, scale)), 1).astype(np.int64)
    gap[basket_seq == 0] = 0
    offset = np.cumsum(gap)
    first = np.flatnonzero(basket_seq == 0)  # [n_customers], first basket of each customer
    offset -= np.repeat(offset[first], n_baskets)
    duration = offset[first + n_baskets - 1]
    start = np.floor(rng.random(n_customers) * np.maximum(span_days - duration, 1))
    day = start.astype(np.int64)[basket_user] + offset

    preferred = rng.uniform(8 * 60, 20 * 60, size=n_customers)
    minute = preferred[basket_user] + rng.normal(0.0, 60.0, size=len(basket_user))
    minute = np.clip(np.rint(minute), _OPEN_MINUTE, _CLOSE_MINUTE).astype(np.int64)
    return day, minute


def basket_items(
    rng: np.random.Generator,
    items: ItemStructure,
    baskets: Baskets,
    t_norm: np.ndarray,
    knobs: Knobs,
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the log: favourites, background picks and their bundle mates, each item once
    per basket, sorted by basket then item (basket indices already run customer by customer in
    time order).

    Shapes: t_norm [B] (each basket's drift time in [0, 1]) -> basket [rows], item [rows] int64.
    """
    fav_basket, fav_item = favourite_picks(
        rng,
        items,
        baskets,
        t_norm[baskets.user_start[:-1]],
        knobs.mean_favourites,
        knobs.rebuy_prob,
        knobs.rebuy_period,
        knobs.favourite_life,
    )
    has_favourite = np.bincount(fav_basket, minlength=len(baskets)) > 0
    bg_basket, bg_item = background_picks(
        rng, items, t_norm, has_favourite, knobs.background_items, knobs.basket_spread
    )
    seed_basket = np.concatenate([fav_basket, bg_basket])
    seed_item = np.concatenate([fav_item, bg_item])
    mate_basket, mate_item = bundle_mates(rng, items, seed_basket, seed_item, knobs.bundle_prob)
    # One sort on (basket, item) both removes duplicate picks and gives the output order.
    key = np.unique(
        np.concatenate([seed_basket, mate_basket]) * knobs.n_items
        + np.concatenate([seed_item, mate_item])
    )
    return np.divmod(key, knobs.n_items)


def favourite_picks(
    rng: np.random.Generator,
    items: ItemStructure,
    baskets: Baskets,
    t_start: np.ndarray,
    mean_favourites: float,
    rebuy_prob: float,
    rebuy_period: tuple[int, int],
    favourite_life: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Favourite items bought at their personal rhythm, for the whole history or, with
    ``favourite_life`` L > 0, within a window of Exponential(L) baskets that starts uniformly in
    [−length, n_baskets): customers take up and drop favourites, and about ``mean_favourites``
    are active at any basket (each customer draws Poisson(mean_favourites · (n_baskets + L) / L)).

    Shapes: t_start [n_customers] (normalised time of each customer's first basket) ->
    basket [m], item [m] (global basket index and item index of every favourite purchase).
    """
    n_baskets, user_start = baskets.n_baskets, baskets.user_start
    n_customers = len(n_baskets)
    if favourite_life > 0:
        n_fav = rng.poisson(mean_favourites * (n_baskets + favourite_life) / favourite_life)
    else:
        n_fav = rng.poisson(mean_favourites, size=n_customers)
    fav_user = np.repeat(np.arange(n_customers, dtype=np.int64), n_fav)
    fav_item = popularity_picks(rng, items, t_start[fav_user], _FAVOURITE_FLATTEN)
    # Drawn with replacement; a repeat would make one item doubly due, so keep each pair once.
    fav_user, fav_item = np.divmod(np.unique(fav_user * items.n_items + fav_item), items.n_items)

    period = rng.integers(rebuy_period[0], rebuy_period[1] + 1, size=len(fav_user))
    phase = rng.integers(0, period)
    first, end = np.zeros(len(fav_user), dtype=np.int64), n_baskets[fav_user]  # active baskets [first, end)
    if favourite_life > 0:
        length = rng.exponential(favourite_life, size=len(fav_user))
        start = np.floor(-length + rng.random(len(fav_user)) * (end + length)).astype(np.int64)
        first, end = np.maximum(start, 0), np.minimum(start + np.ceil(length).astype(np.int64), end)
    n_due = np.maximum(-(-(end - first - phase) // period), 0)
    which = np.repeat(np.arange(len(fav_user), dtype=np.int64), n_due)
    k = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(n_due) - n_due, n_due)
    basket = user_start[fav_user[which]] + first[which] + phase[which] + k * period[which]
    bought = rng.random(len(which)) < rebuy_prob
    return basket[bought], fav_item[which][bought]


def background_picks(
    rng: np.random.Generator,
    items: ItemStructure,
    t_norm: np.ndarray,
    has_favourite: np.ndarray,
    background_items: float,
    basket_spread: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``Poisson(background_items)`` popularity picks per basket (the mean times a log-normal
    factor with ``basket_spread`` > 0), at least one in a basket without a favourite.

    Shapes: t_norm, has_favourite [B] -> basket [m], item [m].
    """
    background_mean = np.full(len(t_norm), float(background_items))  # [B]
    if basket_spread > 0:
        background_mean *= rng.lognormal(-0.5 * basket_spread**2, basket_spread, len(t_norm))
    n_background = rng.poisson(background_mean)
    n_background[(n_background == 0) & ~has_favourite] = 1
    bg_basket = np.repeat(np.arange(len(t_norm), dtype=np.int64), n_background)
    return bg_basket, popularity_picks(rng, items, t_norm[bg_basket])


def bundle_mates(
    rng: np.random.Generator,
    items: ItemStructure,
    basket: np.ndarray,
    item: np.ndarray,
    bundle_prob: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Bundle mates added next to each picked bundle item, each with probability bundle_prob.

    Shapes: basket [m], item [m] -> basket [k], item [k].
    """
    in_bundle = items.bundle_of[item] >= 0
    basket, item = basket[in_bundle], item[in_bundle]
    bundle = items.bundle_of[item]
    start = items.bundle_offsets[bundle]
    size = items.bundle_offsets[bundle + 1] - start
    which = np.repeat(np.arange(len(item), dtype=np.int64), size)
    pos = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(size) - size, size)
    mate = items.bundle_members[start[which] + pos]
    keep = (mate != item[which]) & (rng.random(len(which)) < bundle_prob)
    return basket[which][keep], mate[keep]
