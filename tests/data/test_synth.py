"""Tests of the synthetic log generator: format, determinism, and that each planted effect shows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.synth import COLUMNS, generate_log, item_structure, write_log

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


@pytest.mark.parametrize(
    "bad",
    [
        {"n_customers": 0},
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


def test_write_log_csv_round_trip(tmp_path: Path, log: pd.DataFrame) -> None:
    path = tmp_path / "log.csv"
    write_log(log, path)
    back = pd.read_csv(path, parse_dates=["timestamp"], dtype={"quantity": np.int64})
    back["timestamp"] = back["timestamp"].astype("datetime64[ns]")
    pd.testing.assert_frame_equal(back, log, check_dtype=False)
    assert [p.name for p in tmp_path.iterdir()] == ["log.csv"]


def test_write_log_parquet_round_trip(tmp_path: Path, log: pd.DataFrame) -> None:
    path = tmp_path / "sub" / "log.parquet"
    write_log(log, str(path))
    back = pd.read_parquet(path)
    back["timestamp"] = back["timestamp"].astype("datetime64[ns]")
    pd.testing.assert_frame_equal(back, log, check_dtype=False)


def test_write_log_rejects_other_extensions(tmp_path: Path, log: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        write_log(log, tmp_path / "log.json")
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        write_log(log, tmp_path / "log")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, log: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.csv"
    path.write_text("old\n")

    def half_write(self: pd.DataFrame, target: Path, **kwargs: object) -> None:
        Path(target).write_text("customer_id,bas")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_write)
    with pytest.raises(OSError, match="disk full"):
        write_log(log, path)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["log.csv"]


@pytest.fixture(scope="module")
def realistic():
    from basketgnn.data.synth import realistic_export

    return realistic_export(seed=0, scale=0.1)


def test_realistic_export_has_the_dirt_of_a_real_one(realistic):
    from basketgnn.data.synth import NON_PRODUCT_CODES

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
    from basketgnn.data.synth import realistic_export

    a, b = realistic_export(seed=3, scale=0.04), realistic_export(seed=3, scale=0.04)
    pd.testing.assert_frame_equal(a.export, b.export)
    pd.testing.assert_frame_equal(a.clean, b.clean)
    other = realistic_export(seed=4, scale=0.04).export
    assert len(other) != len(a.export) or not other.equals(a.export)


# --- big logs in parts -------------------------------------------------------------------------

PART_KNOBS = {"n_items": 50, "mean_baskets": 4.0, "max_baskets": 12}


def test_parts_make_one_log_with_unique_ids_and_the_same_items(tmp_path):
    from basketgnn.data.synth import write_log_parts

    out = tmp_path / "big"
    parts = write_log_parts(out, 250, chunk_customers=100, seed=3, **PART_KNOBS)
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert sorted(p.name for p in out.iterdir()) == [p.name for p in parts]  # nothing else
    frames = [pd.read_parquet(p) for p in parts]
    df = pd.concat(frames, ignore_index=True)
    assert list(df.columns) == list(COLUMNS)
    assert [f["customer_id"].nunique() for f in frames] == [100, 100, 50]
    assert df["customer_id"].nunique() == 250 and df["customer_id"].str.len().nunique() == 1
    # A basket belongs to one customer and no two customers share a basket id.
    assert df.groupby("basket_id")["customer_id"].nunique().max() == 1
    assert df.groupby("basket_id")["timestamp"].nunique().max() == 1
    # The items are the whole log's: the same catalogue as generate_log with this seed.
    assert set(df["item_id"]) <= set(item_structure(50, 3).item_ids)
    # Every part is itself what generate_log makes for that chunk, so parts are reproducible.
    again = write_log_parts(tmp_path / "again", 250, chunk_customers=100, seed=3, **PART_KNOBS)
    pd.testing.assert_frame_equal(pd.read_parquet(again[1]), frames[1])
    assert not frames[0]["customer_id"].isin(frames[1]["customer_id"]).any()


def test_parts_resume_after_a_crash_and_start_over_for_other_settings(tmp_path):
    from basketgnn.data.synth import write_log_parts

    out = tmp_path / "big"
    partial = tmp_path / ".big.partial"
    written: list[int] = []
    # A crash after the first part: nothing under the final name, the part kept aside.
    def crash(index, count, rows):
        written.append(index)
        if index == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_log_parts(out, 250, 100, 3, on_part=crash, **PART_KNOBS)
    assert not out.exists() and (partial / "part-00000.parquet").is_file()
    first = pd.read_parquet(partial / "part-00000.parquet")
    write_log_parts(out, 250, 100, 3, on_part=lambda i, n, r: written.append(i), **PART_KNOBS)
    assert written == [0, 1, 2]  # part 0 was not made again
    assert not partial.exists()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "part-00000.parquet"), first)
    # Other settings: what a crash left is not mixed in; an existing log is replaced whole.
    with pytest.raises(KeyboardInterrupt):
        write_log_parts(out, 250, 100, 4, on_part=crash, **PART_KNOBS)
    made: list[int] = []
    write_log_parts(out, 120, 100, 4, on_part=lambda i, n, r: made.append(i), **PART_KNOBS)
    assert made == [0, 1] and len(list(out.iterdir())) == 2


def test_cli_writes_a_big_log_as_parts(tmp_path):
    from typer.testing import CliRunner

    from basketgnn.cli import app
    from basketgnn.errors import UserError

    result = CliRunner().invoke(
        app, ["synth", "--preset", "realistic-clean", "--customers", "300", "--chunk-customers",
              "200", "--out", str(tmp_path / "log")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(tmp_path / "log")
    assert df["customer_id"].nunique() == 300 and df["item_id"].nunique() > 300
    bad = CliRunner().invoke(app, ["synth", "--preset", "realistic", "--out", str(tmp_path / "x")])
    # main() turns a UserError into its message and exit status 2.
    assert isinstance(bad.exception, UserError) and "only plain and realistic-clean" in str(bad.exception)
    assert not (tmp_path / "x").exists()
