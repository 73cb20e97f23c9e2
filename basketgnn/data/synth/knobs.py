"""The generator's knobs (:class:`Knobs`): every setting of :func:`basketgnn.data.synth.generate_log`
but the number of customers, the seed and the chunk, with its default, meaning and range."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from basketgnn.data.synth.base import check
from basketgnn.data.synth.items import ItemStructure, check_item_knobs, item_structure


@dataclass(frozen=True)
class Knobs:
    """Settings of a synthetic log (what each one plants: :mod:`basketgnn.data.synth`).
    Values outside their range raise ``ValueError``."""

    n_items: int = 300
    """Size of the item catalogue (not every item need appear)."""
    mean_baskets: float = 10.0
    """Target mean number of baskets per customer (>= 2)."""
    max_baskets: int = 30
    """Most baskets a customer makes (>= 2)."""
    popularity_exponent: float = 1.0
    """Zipf exponent of the base item popularity; 0 = uniform."""
    mean_favourites: float = 3.0
    """Mean (Poisson) number of favourite items per customer; 0 = no re-buying."""
    rebuy_prob: float = 0.85
    """Probability that a favourite is bought in a basket where it is due."""
    rebuy_period: tuple[int, int] = (2, 4)
    """(low, high) inclusive range of a favourite's period, in baskets."""
    favourite_life: float = 0.0
    """Mean number of baskets a favourite stays one (exponential); 0 = for the whole history.
    With L > 0 customers take up and drop favourites over time, so recent baskets tell more
    than old ones (as in real grocery logs)."""
    background_items: float = 1.5
    """Mean (Poisson) number of popularity-driven picks per basket."""
    bundle_fraction: float = 0.3
    """Fraction of the catalogue that belongs to bundles; 0 = no bundles."""
    bundle_size: tuple[int, int] = (3, 5)
    """(low, high) inclusive range of bundle sizes."""
    bundle_prob: float = 0.8
    """Probability that each bundle mate of a picked bundle item is added too."""
    drift_fraction: float = 0.2
    """Fraction of the items whose popularity drifts (half up, half down)."""
    drift_strength: float = 2.0
    """Log of the end-to-start popularity ratio of a drifting item; 0 = no drift."""
    mean_gap_days: float = 7.0
    """Typical number of days between a customer's baskets, capped so that a customer's
    expected history fits into ``span_days``."""
    gap_regularity: float = 4.0
    """Gamma shape of a customer's gaps; higher = more regular rhythm."""
    span_days: int = 365
    """Days over which customers' histories are spread (a customer whose gaps add up to more
    runs past it)."""
    start_date: str = date(2023, 1, 1).isoformat()
    """Date of day 0 (anything ``numpy.datetime64`` parses)."""
    mean_extra_quantity: float = 0.3
    """Mean (Poisson) of ``quantity - 1``."""
    history_spread: float = 0.0
    """0 = geometric numbers of baskets; > 0 = long-tailed ones: ``round(LogNormal)`` with mean
    ``mean_baskets`` and this sigma, clipped to ``[1, max_baskets]`` (so one-basket customers
    exist, as in real exports)."""
    basket_spread: float = 0.0
    """0 = Poisson background picks; > 0 = long-tailed basket sizes: the Poisson mean of each
    basket is ``background_items`` times a mean-1 log-normal factor with this sigma (a few
    baskets of hundreds of items, as wholesale orders are)."""

    def __post_init__(self) -> None:
        check(self.max_baskets >= 2, "max_baskets must be at least 2")
        check(self.mean_baskets >= 2, "mean_baskets must be at least 2")
        check(self.mean_favourites >= 0, "mean_favourites must be >= 0")
        check(0 <= self.rebuy_prob <= 1, "rebuy_prob must be in [0, 1]")
        check(
            1 <= self.rebuy_period[0] <= self.rebuy_period[1],
            "rebuy_period must be (low, high) with 1 <= low <= high",
        )
        check(self.background_items >= 0, "background_items must be >= 0")
        check(0 <= self.bundle_prob <= 1, "bundle_prob must be in [0, 1]")
        check(self.mean_gap_days >= 1, "mean_gap_days must be at least 1")
        check(self.gap_regularity > 0, "gap_regularity must be > 0")
        check(self.span_days >= 1, "span_days must be at least 1")
        check(self.mean_extra_quantity >= 0, "mean_extra_quantity must be >= 0")
        check(self.history_spread >= 0, "history_spread must be >= 0")
        check(self.basket_spread >= 0, "basket_spread must be >= 0")
        check(self.favourite_life >= 0, "favourite_life must be >= 0")
        check_item_knobs(
            self.n_items, self.popularity_exponent, self.drift_fraction, self.drift_strength,
            self.bundle_fraction, self.bundle_size,
        )  # fmt: skip

    def items(self, seed: int) -> ItemStructure:
        """The items these knobs plant with ``seed`` (:func:`item_structure`)."""
        return item_structure(
            self.n_items,
            seed,
            popularity_exponent=self.popularity_exponent,
            drift_fraction=self.drift_fraction,
            drift_strength=self.drift_strength,
            bundle_fraction=self.bundle_fraction,
            bundle_size=self.bundle_size,
        )
