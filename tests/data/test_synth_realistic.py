"""The ``realistic`` preset (``data/synth/realistic.py``): a raw export's dirt on a planted log."""

from __future__ import annotations

import pandas as pd
import pytest

from basketgnn.data.synth import COLUMNS, NON_PRODUCT_CODES, REALISTIC, realistic_export


@pytest.fixture(scope="module")
def realistic():
    return realistic_export(seed=0, scale=0.1)


def test_realistic_export_has_the_dirt_of_a_real_one(realistic):
    e = realistic.export
    assert list(e.columns) == list(COLUMNS)
    assert 0.18 < e["customer_id"].isna().mean() < 0.32  # guests
    cancelled = e["basket_id"].str.startswith("C").to_numpy()
    assert 0.01 < cancelled.mean() < 0.04
    assert (e["quantity"].to_numpy()[cancelled] < 0).all() and (e["quantity"][~cancelled] > 0).all()
    assert set(NON_PRODUCT_CODES) <= set(e["item_id"])
    ids = e["customer_id"].dropna()
    assert ids.str.fullmatch(r"\d+\.0").all()  # written as floats
    c = realistic.clean
    assert c["customer_id"].str.fullmatch(r"\d+").all() and (c["quantity"] > 0).all()
    assert not c["item_id"].isin(list(NON_PRODUCT_CODES)).any()
    assert not c["basket_id"].str.startswith("C").any()
    # every clean row is an export row (same invoice, item, time)
    key = ["basket_id", "item_id", "timestamp"]
    assert len(c.merge(e[key], on=key)) == len(c)


def test_realistic_export_shape_is_long_tailed(realistic):
    c = realistic.clean
    size = c.groupby("basket_id").size()
    assert 12 < size.mean() < 25 and size.quantile(0.9) > 1.8 * size.mean()
    assert size.max() > 8 * size.mean()  # wholesale-like orders
    history = c.groupby("customer_id")["basket_id"].nunique()
    assert (history == 1).any() and history.max() > 10 * history.median()


def test_realistic_export_is_deterministic_by_seed(realistic):
    a, b = realistic_export(seed=3, scale=0.04), realistic_export(seed=3, scale=0.04)
    pd.testing.assert_frame_equal(a.export, b.export)
    pd.testing.assert_frame_equal(a.clean, b.clean)
    other = realistic_export(seed=4, scale=0.04).export
    assert len(other) != len(a.export) or not other.equals(a.export)


def test_scale_sets_the_number_of_customers_and_must_be_positive():
    small = realistic_export(seed=1, scale=0.01)
    ids = small.export["customer_id"].dropna().unique()
    assert len(ids) <= round(REALISTIC["n_customers"] * 0.01)
    with pytest.raises(ValueError, match="scale"):
        realistic_export(scale=0)
