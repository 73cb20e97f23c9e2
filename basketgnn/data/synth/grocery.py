"""The ``grocery`` preset: a clean log shaped like a grocery chain's year of loyalty-card baskets
(the shape of The Complete Journey: about 60 baskets a customer with a long tail, small baskets
with a long tail, a catalogue of thousands), whose customers take up and drop favourites over
time (``favourite_life``), so that recent baskets tell more than old ones.

Its settings are chosen so that the simple baselines rank as on the real grocery log: TIFU-KNN
ahead of P-TopFreq's all-time counts, and the default model only just ahead of TIFU-KNN. With
favourites kept for the whole history (the other presets) all-time counts are the right
statistic, P-TopFreq is at least as good as TIFU-KNN, and a model's lead over TIFU-KNN looks
larger than on real logs.
"""

from __future__ import annotations

#: The grocery preset's generator settings (:func:`basketgnn.data.synth.generate_log` knobs);
#: 2,600 customers is the calibrated size.
GROCERY = {
    "n_customers": 2600,
    "n_items": 8000,
    "mean_baskets": 60.0,
    "max_baskets": 400,
    "history_spread": 1.0,
    "mean_favourites": 15.0,
    "favourite_life": 6.0,
    "rebuy_prob": 0.3,
    "rebuy_period": (2, 8),
    "background_items": 8.0,
    "basket_spread": 1.3,
    "bundle_fraction": 0.1,
    "bundle_prob": 0.5,
}
