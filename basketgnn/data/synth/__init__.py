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
  probability ``rebuy_prob``. With ``favourite_life`` L > 0 a favourite is one only within a
  window of Exponential(L) baskets placed at random over the history (customers draw
  ``Poisson(mean_favourites * (n_baskets + L) / L)`` of them, so about ``mean_favourites`` are
  active at a time): tastes change, and recent baskets tell more than old ones.
* **Background picks.** Every basket also gets ``Poisson(background_items)`` items drawn from the
  drifted popularity at the basket's time (at least one if the basket would otherwise be empty).
* **Bundle completion.** For every item picked so far (favourite or background) that belongs to
  a bundle, each of its bundle mates is added with probability ``bundle_prob``.
* Duplicate picks of an item within a basket collapse into one row; each row gets quantity
  ``1 + Poisson(mean_extra_quantity)``.

Everything is drawn with whole-array numpy operations (per customer, per basket or per row);
only the popularity-over-time sampling loops, over a fixed number of time bins.

Where things are: :mod:`.knobs` (every setting, its default and range), :mod:`.items` (popularity,
drift, bundles), :mod:`.customers` (the steps per customer and basket), :mod:`.generate` (one log
or one chunk of a big one), :mod:`.write` (files and folders of parts), :mod:`.realistic` (the
preset shaped like a raw retail export), :mod:`.grocery` (the preset whose baselines rank as on
a real grocery log), :mod:`.base` (ids, streams, checks).
"""

from basketgnn.data.synth.base import COLUMNS
from basketgnn.data.synth.generate import Chunk, generate_log
from basketgnn.data.synth.grocery import GROCERY
from basketgnn.data.synth.items import ItemStructure, item_structure
from basketgnn.data.synth.knobs import Knobs
from basketgnn.data.synth.realistic import (
    NON_PRODUCT_CODES,
    REALISTIC,
    RealisticExport,
    realistic_export,
)
from basketgnn.data.synth.write import write_log, write_log_parts

__all__ = [
    "COLUMNS", "GROCERY", "NON_PRODUCT_CODES", "REALISTIC", "Chunk", "ItemStructure", "Knobs",
    "RealisticExport", "generate_log", "item_structure", "realistic_export", "write_log",
    "write_log_parts",
]  # fmt: skip
