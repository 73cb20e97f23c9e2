"""Synthetic transaction logs with planted structure, for demos, tests and sanity checks.

Each effect below is one a next-basket model can exploit, so a model's gain over a popularity
baseline here can be traced to structure that was put there on purpose. Every planted effect has
a strength knob, and setting that knob to zero switches the effect off (``popularity_exponent``,
``mean_favourites``, ``bundle_prob`` or ``bundle_fraction``, ``drift_strength`` or
``drift_fraction``).

Generative process
------------------
Items (drawn by :func:`item_structure` from their own random stream, so the ground truth can be
rebuilt from the seed without generating the log):

* **Popularity skew.** Item ``i`` has base weight ``1 / rank_i ** popularity_exponent`` (Zipf),
  with ranks assigned to item ids at random. ``popularity_exponent=0`` gives uniform popularity.
* **Bundles.** A random ``bundle_fraction`` of the items is cut into disjoint bundles of
  ``bundle_size[0]..bundle_size[1]`` items (leftovers too few for a bundle stay single).
* **Drift.** A random ``drift_fraction`` of the items drift: half of them gain and half lose
  popularity, their weight at normalised time ``t`` in [0, 1] (first to last basket of the whole
  log) being ``base * exp(±drift_strength * (t - 0.5))``. So a rising item is ``exp(drift_strength)``
  times more likely to be picked at the end than at the start, and a falling one that much less.
  All members of a bundle share the trend of its first member (so the drifting fraction is
  ``drift_fraction`` only in expectation).

Customers and baskets:

* Each customer makes ``1 + Geometric(1 / (mean_baskets - 1))`` baskets, clipped to
  ``[2, max_baskets]`` (the clipping pulls the realised mean slightly below ``mean_baskets``).
* **Timing.** Each customer has a personal mean gap (``mean_gap_days`` times a log-normal factor,
  capped at ``span_days / n_baskets`` so that frequent shoppers shop more often) and a preferred
  hour of day; gaps between baskets are Gamma distributed around the personal mean with shape
  ``gap_regularity`` (higher = more regular) and are at least one day, so a customer's baskets
  never share a timestamp. Customers start at random days chosen so that their history fits
  into ``span_days`` when it can.
* **Personal re-buying.** Each customer has ``Poisson(mean_favourites)`` favourite items, drawn
  from the square root of the (drifted) popularity at the customer's first basket, each with its
  own period ``p`` (uniform in ``rebuy_period``, in baskets) and phase: the favourite is due in
  the customer's baskets ``phase, phase + p, phase + 2p, ...`` and is bought in a due basket with
  probability ``rebuy_prob``.
* **Background picks.** Every basket also gets ``Poisson(background_items)`` items drawn from the
  drifted popularity at the basket's time (at least one if the basket would otherwise be empty).
* **Bundle completion.** For every item picked so far (favourite or background) that belongs to
  a bundle, each of its bundle mates is added with probability ``bundle_prob``.
* Duplicate picks of an item within a basket collapse into one row; each row gets quantity
  ``1 + Poisson(mean_extra_quantity)``.

Everything is drawn with whole-array numpy operations (per customer, per basket or per row);
only the popularity-over-time sampling loops, over a fixed number of time bins.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from basketgnn.io_utils import atomic_path

#: Column order of a generated log.
COLUMNS = ("customer_id", "basket_id", "timestamp", "item_id", "quantity")

# Drifting popularity is sampled per time bin; 32 bins make the step between neighbouring bins
# (drift_strength / 32 in log-weight) far smaller than the sampling noise of any test or model.
_N_TIME_BINS = 32
# Favourites are drawn from popularity ** 0.5 so that they are not just the global best sellers:
# re-buying must carry information that a popularity model does not already have.
_FAVOURITE_FLATTEN = 0.5
# Spread (log-normal sigma) of customers' personal mean gap between baskets.
_GAP_SPREAD = 0.5
# Preferred shopping hour is uniform in [8, 20); the actual time is within +- 1 h (sd) of it,
# clipped to opening hours 07:00-22:00, which keeps consecutive days' baskets in order.
_OPEN_MINUTE, _CLOSE_MINUTE = 7 * 60, 22 * 60
_MINUTE_NS = 60 * 10**9
_DAY_NS = 24 * 60 * _MINUTE_NS


@dataclass(frozen=True)
class ItemStructure:
    """The item-level ground truth planted in a synthetic log.

    Shapes: item_ids [n_items] str, popularity [n_items] float64 (sums to 1), drift [n_items]
    int8 (+1 rising, -1 falling, 0 stable), bundle_of [n_items] int64 (bundle index or -1),
    bundle_members [n_bundled] int64 item indices, bundle_offsets [n_bundles + 1] int64 (bundle
    ``b`` is ``bundle_members[bundle_offsets[b]:bundle_offsets[b + 1]]``).
    """

    item_ids: np.ndarray
    popularity: np.ndarray
    drift: np.ndarray
    drift_strength: float
    bundle_of: np.ndarray
    bundle_members: np.ndarray
    bundle_offsets: np.ndarray

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_bundles(self) -> int:
        return len(self.bundle_offsets) - 1

    def bundles(self) -> list[np.ndarray]:
        """Item indices of every bundle (for inspection and tests, not hot paths)."""
        o = self.bundle_offsets
        return [self.bundle_members[o[b] : o[b + 1]] for b in range(self.n_bundles)]

    def weights_at(self, t: float) -> np.ndarray:
        """Item pick probabilities at normalised time ``t`` in [0, 1]. Shape [n_items]."""
        w = self.popularity * np.exp(self.drift * (self.drift_strength * (t - 0.5)))
        return w / w.sum()


def item_structure(
    n_items: int = 300,
    seed: int = 0,
    popularity_exponent: float = 1.0,
    drift_fraction: float = 0.2,
    drift_strength: float = 2.0,
    bundle_fraction: float = 0.3,
    bundle_size: tuple[int, int] = (3, 5),
) -> ItemStructure:
    """Popularity, drift and bundles of the items, exactly as :func:`generate_log` plants them.

    Called with the same values as :func:`generate_log` (same seed and item knobs), it returns the
    ground truth of that log; see there for the meaning of the parameters.
    """
    _check(n_items >= 1, "n_items must be at least 1")
    _check(popularity_exponent >= 0, "popularity_exponent must be >= 0")
    _check(0 <= drift_fraction <= 1, "drift_fraction must be in [0, 1]")
    _check(drift_strength >= 0, "drift_strength must be >= 0")
    _check(0 <= bundle_fraction <= 1, "bundle_fraction must be in [0, 1]")
    _check(
        2 <= bundle_size[0] <= bundle_size[1],
        "bundle_size must be (low, high) with 2 <= low <= high",
    )
    rng = np.random.default_rng(_streams(seed)[0])

    rank = rng.permutation(n_items)  # rank of item i is rank[i] (0 = most popular)
    popularity = 1.0 / (rank + 1.0) ** popularity_exponent
    popularity /= popularity.sum()

    n_bundled = round(bundle_fraction * n_items)
    low, high = bundle_size
    sizes = rng.integers(low, high + 1, size=n_bundled // low + 1)
    # Keep the bundles that fit entirely; the remainder (fewer than `high` items) stays single.
    sizes = sizes[np.cumsum(sizes) <= n_bundled]
    bundle_offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bundle_offsets[1:])
    bundle_members = rng.permutation(n_items)[: bundle_offsets[-1]].astype(np.int64)
    bundle_of = np.full(n_items, -1, dtype=np.int64)
    bundle_of[bundle_members] = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)

    drift = np.zeros(n_items, dtype=np.int8)
    drifting = rng.permutation(n_items)[: round(drift_fraction * n_items)]
    half = len(drifting) // 2
    drift[drifting[:half]] = 1
    drift[drifting[half:]] = -1
    # A bundle follows the trend of its first member; mates that drifted apart would have their
    # trend cancelled by bundle completion, which makes drift far weaker than drift_strength.
    drift[bundle_members] = np.repeat(drift[bundle_members[bundle_offsets[:-1]]], sizes)

    return ItemStructure(
        item_ids=_ids("I", n_items, 4),
        popularity=popularity,
        drift=drift,
        drift_strength=float(drift_strength),
        bundle_of=bundle_of,
        bundle_members=bundle_members,
        bundle_offsets=bundle_offsets,
    )


@dataclass(frozen=True)
class Chunk:
    """Which slice of a big log :func:`generate_log` makes (see :func:`write_log_parts`).

    Chunk ``index`` of ``count`` holds the customers ``first_customer ..
    first_customer + n_customers - 1`` of a log of ``total_customers``. Its customers are drawn
    from their own stream (``index`` of ``count`` spawned from the seed's customer stream), so
    every chunk can be made alone, in any order, and the items are those of the whole log.
    """

    index: int
    count: int
    first_customer: int
    total_customers: int


def generate_log(
    n_customers: int = 2000,
    n_items: int = 300,
    mean_baskets: float = 10.0,
    max_baskets: int = 30,
    seed: int = 0,
    *,
    popularity_exponent: float = 1.0,
    mean_favourites: float = 3.0,
    rebuy_prob: float = 0.85,
    rebuy_period: tuple[int, int] = (2, 4),
    background_items: float = 1.5,
    bundle_fraction: float = 0.3,
    bundle_size: tuple[int, int] = (3, 5),
    bundle_prob: float = 0.8,
    drift_fraction: float = 0.2,
    drift_strength: float = 2.0,
    mean_gap_days: float = 7.0,
    gap_regularity: float = 4.0,
    span_days: int = 365,
    start_date: str = "2023-01-01",
    mean_extra_quantity: float = 0.3,
    history_spread: float = 0.0,
    basket_spread: float = 0.0,
    chunk: Chunk | None = None,
) -> pd.DataFrame:
    """Generate a transaction log with planted structure (see the module docstring).

    Parameters
    ----------
    n_customers : number of customers.
    n_items : size of the item catalogue (not every item need appear).
    mean_baskets : target mean number of baskets per customer (>= 2).
    max_baskets : most baskets a customer makes (>= 2).
    seed : random seed; the same arguments give an identical frame.
    popularity_exponent : Zipf exponent of the base item popularity; 0 = uniform.
    mean_favourites : mean (Poisson) number of favourite items per customer; 0 = no re-buying.
    rebuy_prob : probability that a favourite is bought in a basket where it is due.
    rebuy_period : (low, high) inclusive range of a favourite's period, in baskets.
    background_items : mean (Poisson) number of popularity-driven picks per basket.
    bundle_fraction : fraction of the catalogue that belongs to bundles; 0 = no bundles.
    bundle_size : (low, high) inclusive range of bundle sizes.
    bundle_prob : probability that each bundle mate of a picked bundle item is added too.
    drift_fraction : fraction of the items whose popularity drifts (half up, half down).
    drift_strength : log of the end-to-start popularity ratio of a drifting item; 0 = no drift.
    mean_gap_days : typical number of days between a customer's baskets (before the cap that
        keeps a customer's history within span_days).
    gap_regularity : Gamma shape of a customer's gaps; higher = more regular rhythm.
    span_days : days over which customers' histories are spread (a customer whose gaps add up
        to more runs past it).
    start_date : date of day 0 (anything ``numpy.datetime64`` parses, e.g. "2023-01-01").
    mean_extra_quantity : mean (Poisson) of ``quantity - 1``.
    history_spread : 0 = geometric numbers of baskets (as above); > 0 = long-tailed ones:
        ``round(LogNormal)`` with mean ``mean_baskets`` and this sigma, clipped to
        ``[1, max_baskets]`` (so one-basket customers exist, as in real exports).
    basket_spread : 0 = Poisson background picks (as above); > 0 = long-tailed basket sizes:
        the Poisson mean of each basket is ``background_items`` times a mean-1 log-normal factor
        with this sigma (a few baskets of hundreds of items, as wholesale orders are).
    chunk : None = the whole log; else one slice of a bigger log (:class:`Chunk`): customer ids
        count from ``chunk.first_customer``, basket ids are ``customer index * max_baskets +
        basket number`` (unique over the whole log, in time order per customer), and drift time
        is day / span_days (not the slice's own first-to-last day), so slices fit together.

    Returns
    -------
    One row per (basket, item), sorted by customer, then timestamp (then item), with columns
    ``customer_id`` (str, "C000123"), ``basket_id`` (str, "B0000456", unique over the log),
    ``timestamp`` (datetime64[ns], shared by a basket's rows), ``item_id`` (str, "I0042") and
    ``quantity`` (int64, >= 1). Item ``I0042`` is item index 42 of :func:`item_structure`.
    """
    _check(n_customers >= 1, "n_customers must be at least 1")
    _check(max_baskets >= 2, "max_baskets must be at least 2")
    _check(mean_baskets >= 2, "mean_baskets must be at least 2")
    _check(mean_favourites >= 0, "mean_favourites must be >= 0")
    _check(0 <= rebuy_prob <= 1, "rebuy_prob must be in [0, 1]")
    _check(
        1 <= rebuy_period[0] <= rebuy_period[1],
        "rebuy_period must be (low, high) with 1 <= low <= high",
    )
    _check(background_items >= 0, "background_items must be >= 0")
    _check(0 <= bundle_prob <= 1, "bundle_prob must be in [0, 1]")
    _check(mean_gap_days >= 1, "mean_gap_days must be at least 1")
    _check(gap_regularity > 0, "gap_regularity must be > 0")
    _check(span_days >= 1, "span_days must be at least 1")
    _check(mean_extra_quantity >= 0, "mean_extra_quantity must be >= 0")
    items = item_structure(
        n_items,
        seed,
        popularity_exponent=popularity_exponent,
        drift_fraction=drift_fraction,
        drift_strength=drift_strength,
        bundle_fraction=bundle_fraction,
        bundle_size=bundle_size,
    )
    customer_stream = _streams(seed)[1]
    if chunk is not None:
        _check(0 <= chunk.index < chunk.count, "chunk.index must be in [0, chunk.count)")
        _check(
            chunk.first_customer + n_customers <= chunk.total_customers,
            "a chunk's customers must lie inside chunk.total_customers",
        )
        customer_stream = customer_stream.spawn(chunk.count)[chunk.index]
    rng = np.random.default_rng(customer_stream)

    _check(history_spread >= 0, "history_spread must be >= 0")
    _check(basket_spread >= 0, "basket_spread must be >= 0")
    if history_spread > 0:
        raw = rng.lognormal(np.log(mean_baskets) - 0.5 * history_spread**2, history_spread, n_customers)
        n_baskets = np.clip(np.rint(raw), 1, max_baskets).astype(np.int64)  # [n_customers]
    else:
        n_baskets = 1 + rng.geometric(1.0 / (mean_baskets - 1.0), size=n_customers)
        n_baskets = np.clip(n_baskets, 2, max_baskets).astype(np.int64)  # [n_customers]
    user_start = np.zeros(n_customers + 1, dtype=np.int64)
    np.cumsum(n_baskets, out=user_start[1:])
    basket_user = np.repeat(np.arange(n_customers, dtype=np.int64), n_baskets)  # [B]
    basket_seq = np.arange(len(basket_user), dtype=np.int64) - user_start[basket_user]

    day, minute = _basket_times(
        rng, n_baskets, basket_user, basket_seq, mean_gap_days, gap_regularity, span_days
    )
    timestamp = (
        np.datetime64(start_date, "D").astype("datetime64[ns]").astype(np.int64)
        + day * _DAY_NS
        + minute * _MINUTE_NS
    )
    if chunk is None:
        t_norm = (day - day.min()) / max(int(day.max() - day.min()), 1)  # [B] in [0, 1]
    else:  # the same clock in every slice
        t_norm = np.clip(day / span_days, 0.0, 1.0)

    fav_basket, fav_item = _favourite_picks(
        rng,
        items,
        n_baskets,
        user_start,
        t_norm[user_start[:-1]],
        mean_favourites,
        rebuy_prob,
        rebuy_period,
    )
    background_mean = np.full(len(basket_user), float(background_items))  # [B]
    if basket_spread > 0:
        background_mean *= rng.lognormal(-0.5 * basket_spread**2, basket_spread, len(basket_user))
    n_background = rng.poisson(background_mean)
    has_favourite = np.bincount(fav_basket, minlength=len(basket_user)) > 0
    n_background[(n_background == 0) & ~has_favourite] = 1
    bg_basket = np.repeat(np.arange(len(basket_user), dtype=np.int64), n_background)
    bg_item = _popularity_picks(rng, items, t_norm[bg_basket])

    seed_basket = np.concatenate([fav_basket, bg_basket])
    seed_item = np.concatenate([fav_item, bg_item])
    mate_basket, mate_item = _bundle_mates(rng, items, seed_basket, seed_item, bundle_prob)

    # One sort on (basket, item) both removes duplicate picks and gives the output order,
    # because basket indices already run customer by customer in time order.
    key = np.unique(
        np.concatenate([seed_basket, mate_basket]) * n_items
        + np.concatenate([seed_item, mate_item])
    )
    row_basket, row_item = np.divmod(key, n_items)
    quantity = 1 + rng.poisson(mean_extra_quantity, size=len(key))

    if chunk is None:
        customer_ids = _ids("C", n_customers, 6)
        basket_ids = _ids("B", len(basket_user), 7)
    else:
        total = chunk.total_customers
        customer_ids = _ids("C", n_customers, 6, chunk.first_customer, total)
        basket_number = (chunk.first_customer + basket_user) * max_baskets + basket_seq  # [B]
        basket_ids = _ids("B", len(basket_user), 7, 0, total * max_baskets, basket_number)
    return pd.DataFrame(
        {
            "customer_id": customer_ids[basket_user[row_basket]],
            "basket_id": basket_ids[row_basket],
            "timestamp": timestamp[row_basket].astype("datetime64[ns]"),
            "item_id": items.item_ids[row_item],
            "quantity": quantity.astype(np.int64),
        },
        columns=list(COLUMNS),
    )


def write_log(df: pd.DataFrame, path: str | Path) -> None:
    """Write a log as CSV (``.csv``) or Parquet (``.parquet``), atomically.

    The file is written under a temporary name in the destination folder and renamed into place,
    so readers never see a half-written log. Missing parent folders are created.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in {".csv", ".parquet"}:
        raise ValueError(
            f"cannot write a log to {str(path)!r}: the file name must end in .csv or .parquet "
            f"(got {path.suffix or 'no extension'!r})"
        )
    with atomic_path(path) as tmp:
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


def write_log_parts(
    out_dir: str | Path,
    n_customers: int,
    chunk_customers: int = 50_000,
    seed: int = 0,
    on_part: Callable[[int, int, int], None] | None = None,
    **settings: Any,
) -> list[Path]:
    """Write a big log as a folder of Parquet parts, one :class:`Chunk` of customers each.

    Memory stays that of one chunk (``chunk_customers`` customers), whatever ``n_customers``.
    Parts ``part-00000.parquet`` ... are written into a hidden sibling ``.NAME.partial/`` (each
    one atomically) and the folder is renamed to ``out_dir`` once all are there: readers never
    see a half-written log, and a rerun with the same arguments keeps the parts already written
    (a rerun with other arguments starts over). ``settings`` are :func:`generate_log`'s knobs.
    ``on_part(index, count, rows)`` is called after each part. Returns the parts' paths.
    """
    _check(n_customers >= 1, "n_customers must be at least 1")
    _check(chunk_customers >= 1, "chunk_customers must be at least 1")
    out_dir = Path(out_dir)
    partial = out_dir.with_name(f".{out_dir.name}.partial")
    wanted = json.dumps(
        {"n_customers": n_customers, "chunk_customers": chunk_customers, "seed": seed,
         "settings": settings}, sort_keys=True, default=list,
    )  # fmt: skip
    marker = partial / "_settings.json"
    if partial.exists() and not (marker.is_file() and marker.read_text() == wanted):
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    marker.write_text(wanted)
    count = -(-n_customers // chunk_customers)
    names = [f"part-{j:05d}.parquet" for j in range(count)]
    for j, name in enumerate(names):
        if (partial / name).is_file():
            continue
        first = j * chunk_customers
        size = min(chunk_customers, n_customers - first)
        df = generate_log(
            n_customers=size, seed=seed, chunk=Chunk(j, count, first, n_customers), **settings
        )
        write_log(df, partial / name)
        if on_part is not None:
            on_part(j, count, len(df))
    marker.unlink()
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(partial, out_dir)
        shutil.rmtree(old)
    else:
        os.replace(partial, out_dir)
    return [out_dir / name for name in names]


def _basket_times(
    rng: np.random.Generator,
    n_baskets: np.ndarray,
    basket_user: np.ndarray,
    basket_seq: np.ndarray,
    mean_gap_days: float,
    gap_regularity: float,
    span_days: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Day number and minute of day of every basket.

    Shapes: n_baskets [n_customers]; basket_user, basket_seq [B] -> day [B] int64, minute [B]
    int64. Days strictly increase within a customer.
    """
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


def _favourite_picks(
    rng: np.random.Generator,
    items: ItemStructure,
    n_baskets: np.ndarray,
    user_start: np.ndarray,
    t_start: np.ndarray,
    mean_favourites: float,
    rebuy_prob: float,
    rebuy_period: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Favourite items bought at their personal rhythm.

    Shapes: n_baskets [n_customers], user_start [n_customers + 1], t_start [n_customers]
    (normalised time of each customer's first basket) -> basket [m], item [m] (global basket
    index and item index of every favourite purchase).
    """
    n_customers = len(n_baskets)
    n_fav = rng.poisson(mean_favourites, size=n_customers)
    fav_user = np.repeat(np.arange(n_customers, dtype=np.int64), n_fav)
    fav_item = _popularity_picks(rng, items, t_start[fav_user], _FAVOURITE_FLATTEN)
    # Drawn with replacement; a repeat would make one item doubly due, so keep each pair once.
    fav_user, fav_item = np.divmod(np.unique(fav_user * items.n_items + fav_item), items.n_items)

    period = rng.integers(rebuy_period[0], rebuy_period[1] + 1, size=len(fav_user))
    phase = rng.integers(0, period)
    n_due = np.maximum(-(-(n_baskets[fav_user] - phase) // period), 0)
    which = np.repeat(np.arange(len(fav_user), dtype=np.int64), n_due)
    k = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(n_due) - n_due, n_due)
    basket = user_start[fav_user[which]] + phase[which] + k * period[which]
    bought = rng.random(len(which)) < rebuy_prob
    return basket[bought], fav_item[which][bought]


def _popularity_picks(
    rng: np.random.Generator, items: ItemStructure, t: np.ndarray, power: float = 1.0
) -> np.ndarray:
    """One item per entry of ``t``, drawn from the drifted popularity at that time ** power.

    Shapes: t [m] in [0, 1] -> item [m] int64.
    """
    out = np.empty(len(t), dtype=np.int64)
    time_bin = np.minimum((t * _N_TIME_BINS).astype(np.int64), _N_TIME_BINS - 1)
    order = np.argsort(time_bin, kind="stable")
    bounds = np.searchsorted(time_bin[order], np.arange(_N_TIME_BINS + 1))
    for b in range(_N_TIME_BINS):
        idx = order[bounds[b] : bounds[b + 1]]
        if len(idx):
            cdf = np.cumsum(items.weights_at((b + 0.5) / _N_TIME_BINS) ** power)
            out[idx] = _sample(rng, cdf, len(idx))
    return out


def _bundle_mates(
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


def _sample(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    """n indices drawn with probabilities given by a cumulative distribution. Shape [n]."""
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    # Guards against the float round-off case u * cdf[-1] == cdf[-1].
    return np.minimum(idx, len(cdf) - 1).astype(np.int64)


def _streams(seed: int) -> list[np.random.SeedSequence]:
    """Independent streams for the items (0) and the customers (1) of one seed."""
    return np.random.SeedSequence(seed).spawn(2)


def _ids(
    prefix: str,
    n: int,
    min_width: int,
    first: int = 0,
    total: int | None = None,
    numbers: np.ndarray | None = None,
) -> np.ndarray:
    """Zero-padded ids ``prefix + number``, equally wide so they sort like the numbers: the
    numbers ``first .. first + n - 1`` (or the given ``numbers``), as wide as the largest of
    ``total`` (default: of these). Shape [n]."""
    total = first + n if total is None else total
    width = max(min_width, len(str(max(total - 1, 0))))
    values = range(first, first + n) if numbers is None else numbers.tolist()
    return np.array([f"{prefix}{i:0{width}d}" for i in values], dtype=object)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


#: Non-product codes of the realistic export (item id -> what it stands for).
NON_PRODUCT_CODES = {
    "POST": "postage",
    "M": "manual adjustment",
    "BANK CHARGES": "bank charges",
    "D": "discount (in cancellation invoices, negative quantity)",
}

#: The realistic preset's generator settings (see :func:`realistic_export`). Calibrated so the
#: export looks like the real one of issue 8: baskets of ~18 items (p90 ~42, max 500+),
#: histories up to ~250 baskets, ~3,000 customers with at least two baskets.
REALISTIC = {
    "n_customers": 6200,  # identified + guests (a quarter of the rows lose their customer)
    "n_items": 3600,
    "mean_baskets": 5.0,
    "max_baskets": 250,
    "history_spread": 1.3,
    "popularity_exponent": 0.9,
    "mean_favourites": 8.0,
    "rebuy_period": (2, 5),
    "background_items": 13.0,
    "basket_spread": 1.3,
    "bundle_fraction": 0.3,
    "bundle_size": (2, 4),
    "bundle_prob": 0.5,
    "mean_extra_quantity": 5.0,
}
# Shares of the realistic export: customers whose rows lose their id (guests), purchase rows
# later cancelled, and baskets that carry each non-product code.
_GUEST_SHARE = 0.25
_CANCEL_SHARE = 0.02
_CODE_BASKET_SHARE = {"POST": 0.06, "M": 0.004, "BANK CHARGES": 0.002}
_DISCOUNT_SHARE = 0.05  # of cancellation invoices, which also get a "D" row
_FIRST_INVOICE = 536365
_FIRST_CUSTOMER = 12346


@dataclass(frozen=True)
class RealisticExport:
    """A raw export shaped like a real retailer's and the same log cleaned.

    ``export``: one row per invoice line, in invoice-date order, columns :data:`COLUMNS`:
    ``customer_id`` str written as a float ("17850.0") or empty (no customer); ``basket_id`` the
    invoice number ("536365"; "C536412" for a cancellation); ``timestamp``; ``item_id`` (a
    product "I0042" or a code of :data:`NON_PRODUCT_CODES`); ``quantity`` int (< 0 in
    cancellations).
    ``clean``: the export without cancellation rows (quantity <= 0), non-product codes and rows
    without a customer, with customer ids written as integers ("17850"): what ingestion with
    returns excluded and the codes dropped keeps.
    """

    export: pd.DataFrame
    clean: pd.DataFrame


def realistic_export(seed: int = 0, scale: float = 1.0) -> RealisticExport:
    """The ``realistic`` preset: a log from :data:`REALISTIC` dressed up as a raw export.

    ``scale`` multiplies the number of customers (tests use a small one). Planted signal
    (re-buying, bundles, popularity skew, drift) is that of :func:`generate_log`; the dressing
    adds guests (``_GUEST_SHARE`` of the customers lose their id), cancellation invoices for
    ``_CANCEL_SHARE`` of the purchase rows (negative quantity, a "C" invoice 1-72 h after the
    purchase, some with a "D" discount row), postage / manual / bank-charge rows, and
    float-written customer ids.
    """
    _check(scale > 0, "scale must be > 0")
    settings = dict(REALISTIC, n_customers=max(2, round(REALISTIC["n_customers"] * scale)))
    log = generate_log(seed=seed, **settings)  # type: ignore[arg-type]
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])

    customer = log["customer_id"].str[1:].astype(np.int64).to_numpy()  # [rows] index
    n_cust = int(settings["n_customers"])
    guest = rng.random(n_cust) < _GUEST_SHARE  # [n_cust]
    number = _FIRST_CUSTOMER + rng.permutation(n_cust)  # [n_cust] numeric customer ids
    # Rows are grouped by basket, so factorize numbers the baskets in row order.
    basket_row, basket = pd.factorize(log["basket_id"])
    ts = log["timestamp"].to_numpy().astype(np.int64)
    first_row = np.flatnonzero(np.r_[True, basket_row[1:] != basket_row[:-1]])
    basket_ts = ts[first_row]  # [n_baskets]
    basket_cust = customer[first_row]
    # Invoice numbers in time order, as a till numbers them.
    invoice_of = np.empty(len(basket), dtype=np.int64)
    invoice_of[np.argsort(basket_ts, kind="stable")] = _FIRST_INVOICE + np.arange(len(basket))

    parts = [
        pd.DataFrame({
            "cust": customer, "invoice": invoice_of[basket_row].astype(str), "ts": ts,
            "item_id": log["item_id"].to_numpy(), "quantity": log["quantity"].to_numpy(),
        })
    ]  # fmt: skip
    # Non-product codes ride on purchase invoices.
    for code, share in _CODE_BASKET_SHARE.items():
        b = np.flatnonzero(rng.random(len(basket)) < share)
        parts.append(pd.DataFrame({
            "cust": basket_cust[b], "invoice": invoice_of[b].astype(str), "ts": basket_ts[b],
            "item_id": code, "quantity": rng.integers(1, 4, len(b)),
        }))  # fmt: skip
    # Cancellations: one "C" invoice per purchase invoice with cancelled lines.
    cancel = np.flatnonzero(rng.random(len(log)) < _CANCEL_SHARE)  # [k] rows
    c_basket, c_row_basket = np.unique(basket_row[cancel], return_inverse=True)
    c_invoice = invoice_of.max() + 1 + np.arange(len(c_basket))
    c_ts = basket_ts[c_basket] + rng.integers(1, 73, len(c_basket)) * 60 * _MINUTE_NS
    parts.append(pd.DataFrame({
        "cust": customer[cancel], "invoice": np.char.add("C", c_invoice.astype(str))[c_row_basket],
        "ts": c_ts[c_row_basket], "item_id": log["item_id"].to_numpy()[cancel],
        "quantity": -log["quantity"].to_numpy()[cancel],
    }))  # fmt: skip
    d = np.flatnonzero(rng.random(len(c_basket)) < _DISCOUNT_SHARE)
    parts.append(pd.DataFrame({
        "cust": basket_cust[c_basket[d]], "invoice": np.char.add("C", c_invoice[d].astype(str)),
        "ts": c_ts[d], "item_id": "D", "quantity": -1,
    }))  # fmt: skip

    rows = pd.concat(parts, ignore_index=True)
    rows = rows.sort_values(["ts", "invoice"], kind="stable", ignore_index=True)
    cust = rows["cust"].to_numpy()
    is_guest = guest[cust]
    ids = number[cust].astype(str)
    export = pd.DataFrame(
        {
            "customer_id": np.where(is_guest, None, np.char.add(ids, ".0")).astype(object),
            "basket_id": rows["invoice"].to_numpy(),
            "timestamp": rows["ts"].to_numpy().astype("datetime64[ns]"),
            "item_id": rows["item_id"].to_numpy(),
            "quantity": rows["quantity"].to_numpy().astype(np.int64),
        },
        columns=list(COLUMNS),
    )
    keep = ~is_guest & (export["quantity"].to_numpy() > 0)
    keep &= ~export["item_id"].isin(list(NON_PRODUCT_CODES)).to_numpy()
    clean = export[keep].assign(customer_id=ids[keep]).reset_index(drop=True)
    return RealisticExport(export=export, clean=clean)
