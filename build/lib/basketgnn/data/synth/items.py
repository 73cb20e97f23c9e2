"""The items of a synthetic log: popularity, drift and bundles (:func:`item_structure`, drawn from
the seed's own item stream, so the ground truth is rebuilt from the seed without the log), and
picks from the drifted popularity (:func:`popularity_picks`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from basketgnn.data.synth.base import check, ids, streams

# Drifting popularity is sampled per time bin; 32 bins make the step between neighbouring bins
# (drift_strength / 32 in log-weight) far smaller than the sampling noise of any test or model.
_N_TIME_BINS = 32


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


def check_item_knobs(
    n_items: int,
    popularity_exponent: float,
    drift_fraction: float,
    drift_strength: float,
    bundle_fraction: float,
    bundle_size: tuple[int, int],
) -> None:
    """Raise ``ValueError`` for an item knob outside its range."""
    check(n_items >= 1, "n_items must be at least 1")
    check(popularity_exponent >= 0, "popularity_exponent must be >= 0")
    check(0 <= drift_fraction <= 1, "drift_fraction must be in [0, 1]")
    check(drift_strength >= 0, "drift_strength must be >= 0")
    check(0 <= bundle_fraction <= 1, "bundle_fraction must be in [0, 1]")
    check(
        2 <= bundle_size[0] <= bundle_size[1],
        "bundle_size must be (low, high) with 2 <= low <= high",
    )


def item_structure(
    n_items: int = 300,
    seed: int = 0,
    popularity_exponent: float = 1.0,
    drift_fraction: float = 0.2,
    drift_strength: float = 2.0,
    bundle_fraction: float = 0.3,
    bundle_size: tuple[int, int] = (3, 5),
) -> ItemStructure:
    """Popularity, drift and bundles of the items, exactly as
    :func:`~basketgnn.data.synth.generate.generate_log` plants them.

    Called with the same seed and item knobs as a log, it returns the ground truth of that log;
    the knobs are described in :class:`~basketgnn.data.synth.knobs.Knobs`.
    """
    check_item_knobs(
        n_items, popularity_exponent, drift_fraction, drift_strength, bundle_fraction, bundle_size
    )
    rng = np.random.default_rng(streams(seed)[0])

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
        item_ids=ids("I", n_items, 4),
        popularity=popularity,
        drift=drift,
        drift_strength=float(drift_strength),
        bundle_of=bundle_of,
        bundle_members=bundle_members,
        bundle_offsets=bundle_offsets,
    )


def popularity_picks(
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
            out[idx] = sample(rng, cdf, len(idx))
    return out


def sample(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    """n indices drawn with probabilities given by a cumulative distribution. Shape [n]."""
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    # Guards against the float round-off case u * cdf[-1] == cdf[-1].
    return np.minimum(idx, len(cdf) - 1).astype(np.int64)
