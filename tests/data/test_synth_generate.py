"""The synthetic log generator (``data/synth/generate.py``): format, determinism, chunks, and that
each planted effect shows in the log."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.synth import COLUMNS, Chunk, generate_log, item_structure

SMALL = {"n_customers": 400, "n_items": 120, "mean_baskets": 8.0, "seed": 0}


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return generate_log(**SMALL)


def _item_index(df: pd.DataFrame) -> np.ndarray:
    return df["item_id"].str[1:].astype(int).to_numpy()


def _repeat_fraction(df: pd.DataFrame) -> float:
    """Share of items in customers' second and later baskets that they had bought before."""
    baskets = df.drop_duplicates("basket_id")[["basket_id", "customer_id", "timestamp"]]
    baskets = baskets.sort_values(["customer_id", "timestamp"])
    baskets["seq"] = baskets.groupby("customer_id").cumcount()
    rows = df[["basket_id", "item_id"]].merge(baskets, on="basket_id")
    first_seq = rows.groupby(["customer_id", "item_id"])["seq"].transform("min")
    later = rows["seq"] > 0
    return float((rows["seq"][later] > first_seq[later]).mean())


def _shuffle_customers(df: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The same baskets dealt to customers at random: keeps popularity, destroys personal habits."""
    baskets = df.drop_duplicates("basket_id")
    shuffled = np.random.default_rng(seed).permutation(baskets["customer_id"].to_numpy())
    owner = pd.Series(shuffled, index=baskets["basket_id"].to_numpy())
    return df.assign(customer_id=df["basket_id"].map(owner).to_numpy())


def _lift(df: pd.DataFrame, n_items: int) -> np.ndarray:
    """P(a and b in a basket) / (P(a) P(b)) for all item pairs. Shape [n_items, n_items]."""
    basket = pd.factorize(df["basket_id"])[0]
    onehot = np.zeros((basket.max() + 1, n_items))
    onehot[basket, _item_index(df)] = 1.0
    joint = onehot.T @ onehot / len(onehot)
    marginal = onehot.mean(axis=0)
    return joint / np.maximum(np.outer(marginal, marginal), 1e-12)


def _bundle_pair_mask(n_items: int, seed: int) -> np.ndarray:
    """True for pairs (a < b) of distinct items in the same bundle. Shape [n_items, n_items]."""
    bundle_of = item_structure(n_items, seed).bundle_of
    same = (bundle_of[:, None] == bundle_of[None, :]) & (bundle_of[:, None] >= 0)
    return same & np.triu(np.ones((n_items, n_items), dtype=bool), k=1)


def test_columns_dtypes_and_id_formats(log: pd.DataFrame) -> None:
    assert list(log.columns) == list(COLUMNS)
    for col in ("customer_id", "basket_id", "item_id"):
        assert pd.api.types.is_string_dtype(log[col])
    assert log["timestamp"].dtype == np.dtype("datetime64[ns]")
    assert log["quantity"].dtype == np.int64
    assert (log["quantity"] >= 1).all()
    assert log["quantity"].max() > 1
    assert log["customer_id"].str.fullmatch(r"C\d{6}").all()
    assert log["basket_id"].str.fullmatch(r"B\d{7}").all()
    assert log["item_id"].str.fullmatch(r"I\d{4}").all()
    assert log["customer_id"].nunique() == SMALL["n_customers"]
    assert _item_index(log).max() < SMALL["n_items"]
    assert not log.isna().any().any()


def test_same_seed_identical_other_seed_different(log: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(generate_log(**SMALL), log)
    other = generate_log(**{**SMALL, "seed": 1})
    assert not (len(other) == len(log) and other.equals(log))


def test_baskets_are_well_formed(log: pd.DataFrame) -> None:
    per_basket = log.groupby("basket_id").agg(
        customers=("customer_id", "nunique"),
        times=("timestamp", "nunique"),
        rows=("item_id", "size"),
        items=("item_id", "nunique"),
    )
    assert (per_basket["customers"] == 1).all()
    assert (per_basket["times"] == 1).all()
    assert (per_basket["rows"] == per_basket["items"]).all()
    # A customer's baskets have distinct times, so time order is unambiguous.
    baskets = log.drop_duplicates("basket_id")
    assert not baskets.duplicated(["customer_id", "timestamp"]).any()


def test_rows_sorted_by_customer_then_time(log: pd.DataFrame) -> None:
    resorted = log.sort_values(["customer_id", "timestamp"], kind="stable")
    assert resorted.index.equals(log.index)
    assert log.index.equals(pd.RangeIndex(len(log)))


def test_baskets_per_customer_within_bounds() -> None:
    df = generate_log(n_customers=500, n_items=50, mean_baskets=8.0, max_baskets=5, seed=3)
    counts = df.groupby("customer_id")["basket_id"].nunique()
    assert counts.min() >= 2
    assert counts.max() == 5
    assert (counts == 2).any()


def test_mean_baskets_roughly_respected() -> None:
    df = generate_log(n_customers=2000, n_items=50, mean_baskets=10.0, max_baskets=30, seed=4)
    counts = df.groupby("customer_id")["basket_id"].nunique()
    assert 8.0 < counts.mean() < 10.5
    assert counts.std() > 3  # variable lengths, not everyone at the mean


def test_popularity_is_skewed(log: pd.DataFrame) -> None:
    counts = log["item_id"].value_counts()
    top = counts.iloc[: SMALL["n_items"] // 10].sum() / len(log)
    assert top > 0.3  # the top 10% of items carry at least three times their fair share


def test_customers_rebuy_their_favourites(log: pd.DataFrame) -> None:
    real = _repeat_fraction(log)
    control = _repeat_fraction(_shuffle_customers(log, seed=1))
    assert real > control + 0.08


def test_rebuying_vanishes_without_favourites() -> None:
    df = generate_log(**SMALL, mean_favourites=0)
    assert abs(_repeat_fraction(df) - _repeat_fraction(_shuffle_customers(df, seed=1))) < 0.04


def test_bundles_co_occur(log: pd.DataFrame) -> None:
    n_items = SMALL["n_items"]
    lift = _lift(log, n_items)
    bundled = _bundle_pair_mask(n_items, SMALL["seed"])
    others = np.triu(np.ones((n_items, n_items), dtype=bool), k=1) & ~bundled
    assert bundled.sum() >= 20
    assert np.median(lift[bundled]) > 5
    assert np.median(lift[others]) < 1.5


def test_bundles_vanish_without_bundle_prob() -> None:
    df = generate_log(**SMALL, bundle_prob=0.0)
    n_items = SMALL["n_items"]
    assert np.median(_lift(df, n_items)[_bundle_pair_mask(n_items, SMALL["seed"])]) < 2


def _drift_ratios(df: pd.DataFrame, drift: np.ndarray) -> tuple[float, float]:
    """Row share of rising and of falling items in the last third of time / in the first third."""
    t = (df["timestamp"] - df["timestamp"].min()) / (df["timestamp"].max() - df["timestamp"].min())
    items = _item_index(df)
    first, last = (t < 1 / 3).to_numpy(), (t > 2 / 3).to_numpy()

    def ratio(direction: int) -> float:
        group = np.flatnonzero(drift == direction)
        return np.isin(items[last], group).mean() / np.isin(items[first], group).mean()

    return ratio(1), ratio(-1)


def test_drifting_items_gain_and_lose_popularity(log: pd.DataFrame) -> None:
    structure = item_structure(SMALL["n_items"], SMALL["seed"])
    assert (structure.drift == 1).sum() >= 5 and (structure.drift == -1).sum() >= 5
    rising, falling = _drift_ratios(log, structure.drift)
    assert rising > 1.5
    assert falling < 1 / 1.5


def test_no_drift_without_drift_strength() -> None:
    # More customers than elsewhere: a few favourite-heavy customers can swing a small log's shares.
    df = generate_log(**{**SMALL, "n_customers": 2000}, drift_strength=0.0)
    rising, falling = _drift_ratios(df, item_structure(SMALL["n_items"], SMALL["seed"]).drift)
    assert 0.75 < rising < 1.33 and 0.75 < falling < 1.33


def test_n_customers_out_of_range_and_unknown_knobs_raise() -> None:
    with pytest.raises(ValueError, match="n_customers"):
        generate_log(**{**SMALL, "n_customers": 0})
    with pytest.raises(TypeError, match="mean_basket"):
        generate_log(**SMALL, mean_basket=3)
    with pytest.raises(TypeError):
        generate_log(400, 120)  # everything after the number of customers is a keyword


def test_chunks_fit_together_into_one_log() -> None:
    """Two chunks of a 30-customer log: their own customers and basket ids, one clock (day /
    span_days), one catalogue; a chunk outside the log is refused."""
    knobs = {"n_items": 40, "mean_baskets": 4.0, "max_baskets": 8, "seed": 2}
    a = generate_log(20, chunk=Chunk(0, 2, 0, 30), **knobs)
    b = generate_log(10, chunk=Chunk(1, 2, 20, 30), **knobs)
    assert a["customer_id"].unique().tolist() == [f"C{i:06d}" for i in range(20)]
    assert b["customer_id"].unique().tolist() == [f"C{i:06d}" for i in range(20, 30)]
    # basket id = customer index * max_baskets + basket number
    first = b.drop_duplicates("basket_id").groupby("customer_id")["basket_id"].first()
    assert first.tolist() == [f"B{i * 8:07d}" for i in range(20, 30)]
    assert not set(a["basket_id"]) & set(b["basket_id"])
    pd.testing.assert_frame_equal(generate_log(10, chunk=Chunk(1, 2, 20, 30), **knobs), b)
    with pytest.raises(ValueError, match="chunk.total_customers"):
        generate_log(20, chunk=Chunk(1, 2, 20, 30), **knobs)
    with pytest.raises(ValueError, match="chunk.index"):
        generate_log(10, chunk=Chunk(2, 2, 20, 30), **knobs)
