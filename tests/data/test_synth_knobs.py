"""The generator's knobs (``data/synth/knobs.py``): defaults, ranges, and the items they plant."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from basketgnn.data.synth import generate_log
from basketgnn.data.synth.knobs import Knobs

SMALL = {"n_customers": 100, "n_items": 30, "mean_baskets": 4.0, "seed": 0}


@pytest.mark.parametrize(
    "bad",
    [
        {"max_baskets": 1},
        {"mean_baskets": 1.5},
        {"rebuy_prob": 1.5},
        {"rebuy_period": (3, 2)},
        {"bundle_size": (1, 3)},
        {"drift_fraction": -0.1},
        {"mean_gap_days": 0.5},
    ],
)
def test_invalid_parameters_raise(bad: dict) -> None:
    with pytest.raises(ValueError):
        generate_log(**{**SMALL, **bad})


@pytest.mark.parametrize(
    "bad",
    [{"mean_favourites": -1}, {"background_items": -0.5}, {"bundle_prob": -0.1},
     {"gap_regularity": 0}, {"span_days": 0}, {"mean_extra_quantity": -1},
     {"history_spread": -0.1}, {"basket_spread": -1}, {"n_items": 0}, {"favourite_life": -1}],
)  # fmt: skip
def test_knobs_outside_their_range_name_the_knob(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Knobs(**bad)


def test_defaults_are_in_range_and_frozen() -> None:
    k = Knobs()
    assert all(f.default is not dataclasses.MISSING for f in dataclasses.fields(Knobs))
    assert (k.n_items, k.mean_baskets, k.max_baskets, k.rebuy_period) == (300, 10.0, 30, (2, 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.n_items = 3  # type: ignore[misc]


def test_items_are_those_of_item_structure() -> None:
    from basketgnn.data.synth.items import item_structure

    k = Knobs(n_items=40, bundle_fraction=0.5, bundle_size=(2, 3), drift_fraction=0.4)
    a, b = k.items(7), item_structure(40, 7, bundle_fraction=0.5, bundle_size=(2, 3), drift_fraction=0.4)
    np.testing.assert_array_equal(a.bundle_members, b.bundle_members)
    np.testing.assert_array_equal(a.drift, b.drift)
