"""The items of a synthetic log (``data/synth/items.py``): the planted structure, and picks from
the drifted popularity against the probabilities they are drawn with."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.synth.items import item_structure, popularity_picks, sample


def test_item_structure_is_consistent() -> None:
    s = item_structure(n_items=200, seed=5, bundle_fraction=0.5, bundle_size=(3, 5))
    assert s.item_ids[42] == "I0042"
    assert np.isclose(s.popularity.sum(), 1.0)
    sizes = np.diff(s.bundle_offsets)
    assert sizes.min() >= 3 and sizes.max() <= 5
    assert len(np.unique(s.bundle_members)) == len(s.bundle_members)  # bundles are disjoint
    assert 100 - 5 < len(s.bundle_members) <= 100
    for b, members in enumerate(s.bundles()):
        assert (s.bundle_of[members] == b).all()
        assert len(np.unique(s.drift[members])) == 1
    assert (s.bundle_of >= 0).sum() == len(s.bundle_members)


def test_item_structure_depends_only_on_seed_and_item_knobs() -> None:
    a, b = item_structure(n_items=80, seed=3), item_structure(n_items=80, seed=3)
    for name in ("popularity", "drift", "bundle_of", "bundle_members", "bundle_offsets"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.popularity, item_structure(n_items=80, seed=4).popularity)


def test_uniform_popularity_and_no_drift_or_bundles_when_switched_off() -> None:
    s = item_structure(n_items=50, seed=1, popularity_exponent=0, drift_fraction=0, bundle_fraction=0)
    np.testing.assert_allclose(s.popularity, np.full(50, 1 / 50))
    assert not s.drift.any() and s.n_bundles == 0 and (s.bundle_of == -1).all()
    np.testing.assert_allclose(s.weights_at(0.0), s.weights_at(1.0))


def test_weights_at_is_the_drift_formula() -> None:
    s = item_structure(n_items=30, seed=2, drift_fraction=0.5, drift_strength=1.5)
    for t in (0.0, 0.3, 1.0):
        w = s.popularity * np.exp(s.drift * 1.5 * (t - 0.5))
        np.testing.assert_allclose(s.weights_at(t), w / w.sum())


@pytest.mark.parametrize("bad", [{"n_items": 0}, {"popularity_exponent": -1}, {"drift_fraction": 1.5},
                                 {"drift_strength": -1}, {"bundle_fraction": 2}, {"bundle_size": (1, 3)}])  # fmt: skip
def test_item_knobs_out_of_range_raise(bad) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        item_structure(**bad)


def test_sample_follows_the_cumulative_distribution() -> None:
    p = np.array([0.1, 0.0, 0.6, 0.3])
    draws = sample(np.random.default_rng(0), np.cumsum(p), 40_000)
    assert draws.dtype == np.int64 and 1 not in draws
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 40_000, p, atol=0.01)


def test_popularity_picks_follow_the_weights_at_their_time() -> None:
    s = item_structure(n_items=6, seed=0, drift_fraction=1.0, drift_strength=3.0, bundle_fraction=0)
    rng = np.random.default_rng(1)
    for t, power in ((0.01, 1.0), (0.99, 1.0), (0.5, 0.5)):
        picks = popularity_picks(rng, s, np.full(30_000, t), power)
        # the weights of the time bin holding t (32 bins), raised to power and renormalised
        w = s.weights_at((min(int(t * 32), 31) + 0.5) / 32) ** power
        np.testing.assert_allclose(np.bincount(picks, minlength=6) / 30_000, w / w.sum(), atol=0.015)
