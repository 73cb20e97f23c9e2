"""The generator's steps per customer and basket (``data/synth/customers.py``), each against what
it must produce, worked out directly from its inputs."""

from __future__ import annotations

import numpy as np

from basketgnn.data.synth.customers import (
    Baskets,
    background_picks,
    basket_counts,
    basket_items,
    basket_times,
    bundle_mates,
    favourite_picks,
)
from basketgnn.data.synth.items import item_structure
from basketgnn.data.synth.knobs import Knobs


def test_baskets_of_counts() -> None:
    b = Baskets.of(np.array([2, 3, 1]))
    assert b.user_start.tolist() == [0, 2, 5, 6]
    assert b.basket_user.tolist() == [0, 0, 1, 1, 1, 2]
    assert b.basket_seq.tolist() == [0, 1, 0, 1, 2, 0]
    assert len(b) == 6


def test_basket_counts_geometric_and_long_tailed() -> None:
    rng = np.random.default_rng(0)
    geometric = basket_counts(rng, 5000, 6.0, 12, 0.0)
    assert geometric.dtype == np.int64 and geometric.min() == 2 and geometric.max() == 12
    long_tailed = basket_counts(rng, 5000, 6.0, 200, 1.3)
    assert long_tailed.min() == 1 and long_tailed.max() > 60
    assert 4.5 < long_tailed.mean() < 7.5  # mean about mean_baskets (the rounding and clip aside)


def test_basket_times_increase_within_a_customer_inside_opening_hours() -> None:
    b = Baskets.of(basket_counts(np.random.default_rng(1), 300, 8.0, 30, 0.0))
    day, minute = basket_times(np.random.default_rng(2), b, 7.0, 4.0, 365)
    later = b.basket_seq > 0
    assert (day[later] - day[np.flatnonzero(later) - 1] >= 1).all()  # at least a day apart
    assert (day >= 0).all() and minute.min() >= 7 * 60 and minute.max() <= 22 * 60


def test_favourites_are_due_every_period_from_their_phase() -> None:
    """With rebuy_prob 1 every due basket holds the favourite: for each (customer, item), the
    baskets are phase, phase + p, ... within the customer's history, for one p in the range."""
    items = item_structure(n_items=20, seed=0)
    b = Baskets.of(np.array([9, 12, 5, 7]))
    basket, item = favourite_picks(np.random.default_rng(3), items, b, np.zeros(4), 4.0, 1.0, (2, 3))
    user = b.basket_user[basket]
    assert len(basket)
    for u, i in set(zip(user.tolist(), item.tolist())):
        seq = np.sort(b.basket_seq[basket[(user == u) & (item == i)]])
        period = seq[1] - seq[0] if len(seq) > 1 else None
        assert period is None or period in (2, 3)
        phase = seq[0]
        assert phase < (period or 3)
        expected = np.arange(phase, b.n_baskets[u], period) if period else np.array([phase])
        np.testing.assert_array_equal(seq, expected)


def test_favourites_bought_with_rebuy_prob() -> None:
    items = item_structure(n_items=50, seed=0)
    b = Baskets.of(np.full(400, 20))
    always, _ = favourite_picks(np.random.default_rng(4), items, b, np.zeros(400), 3.0, 1.0, (2, 2))
    half, _ = favourite_picks(np.random.default_rng(4), items, b, np.zeros(400), 3.0, 0.5, (2, 2))
    assert 0.45 < len(half) / len(always) < 0.55


def test_favourites_with_a_life_come_and_go() -> None:
    """favourite_life L: each favourite is bought every period within one window (no gap of more
    than a period inside it), windows are short against 200-basket histories, customers hold
    many more favourites over their history, and about mean_favourites are active at a time."""
    items = item_structure(n_items=400, seed=0)
    b = Baskets.of(np.full(300, 200))
    basket, item = favourite_picks(np.random.default_rng(5), items, b, np.zeros(300), 4.0, 1.0, (2, 2), 6.0)
    forever, item_forever = favourite_picks(np.random.default_rng(5), items, b, np.zeros(300), 4.0, 1.0, (2, 2))
    user, seq = b.basket_user[basket], b.basket_seq[basket]
    pairs = user * items.n_items + item
    spans = []
    for pair in np.unique(pairs):
        s = np.sort(seq[pairs == pair])
        assert (np.diff(s) == 2).all()  # one window, bought at every due basket (period 2)
        spans.append(s[-1] - s[0] + 1)
    assert np.mean(spans) < 12  # windows of Exponential(6) baskets, cut by the history's ends
    distinct = len(np.unique(pairs)) / 300
    distinct_forever = len(np.unique(b.basket_user[forever] * items.n_items + item_forever)) / 300
    assert distinct > 5 * distinct_forever
    # Purchases per basket: a favourite with period 2 is bought in half of its active baskets.
    active = len(basket) / len(b) * 2
    assert 3.0 < active < 5.0, active


def test_background_picks_at_least_one_where_no_favourite() -> None:
    items = item_structure(n_items=10, seed=0)
    has_favourite = np.array([True, False] * 500)
    basket, item = background_picks(
        np.random.default_rng(5), items, np.linspace(0, 1, 1000), has_favourite, 0.2, 0.0
    )
    counts = np.bincount(basket, minlength=1000)
    assert (counts[~has_favourite] >= 1).all() and (counts[has_favourite] == 0).any()
    assert np.all(np.diff(basket) >= 0) and item.max() < 10


def test_bundle_mates_are_the_other_members_of_the_bundle() -> None:
    items = item_structure(n_items=40, seed=1, bundle_fraction=0.5, bundle_size=(3, 3))
    bundled = items.bundle_members[:6]  # two bundles of three
    loose = np.flatnonzero(items.bundle_of < 0)[:2]
    basket = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    item = np.concatenate([bundled, loose])
    mb, mi = bundle_mates(np.random.default_rng(0), items, basket, item, 1.0)
    expected = sorted(
        (int(b), int(m))
        for b, i in zip(basket, item)
        if items.bundle_of[i] >= 0
        for m in items.bundles()[items.bundle_of[i]]
        if m != i
    )
    assert sorted(zip(mb.tolist(), mi.tolist())) == expected
    none_b, _ = bundle_mates(np.random.default_rng(0), items, basket, item, 0.0)
    assert len(none_b) == 0


def test_basket_items_are_sorted_distinct_and_every_basket_holds_one() -> None:
    knobs = Knobs(n_items=25, mean_baskets=5.0)
    items = knobs.items(0)
    b = Baskets.of(np.array([3, 4, 2]))
    basket, item = basket_items(np.random.default_rng(6), items, b, np.linspace(0, 1, 9), knobs)
    key = basket * 25 + item
    assert (np.diff(key) > 0).all()  # sorted by (basket, item), no repeats
    assert set(basket.tolist()) == set(range(9))
