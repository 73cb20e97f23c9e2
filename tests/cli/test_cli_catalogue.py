"""`basketgnn prepare --items`: an item catalogue joined to the prepared data, read by DNNTSP's
catalogue_columns through train and recommend; each bad catalogue file is one message naming the
file and what to fix, exit 2 and no output."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.dataset import BasketData
from tests.support.cli import run


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory, log_csv) -> pd.DataFrame:
    """Every item of the small log with a department (3 values, one missing cell) and a brand."""
    items = sorted(pd.read_csv(log_csv, dtype=str)["item_id"].unique())
    return pd.DataFrame({
        "item_id": items,
        "department": [None if k == 0 else f"dept{k % 3}" for k in range(len(items))],
        "brand": [f"b{k % 2}" for k in range(len(items))],
        "price": [str(1.5 + k) for k in range(len(items))],
    })  # fmt: skip


def test_catalogue_prepare_train_recommend(monkeypatch, capsys, log_csv, catalogue, tmp_path):
    path = tmp_path / "items.parquet"
    catalogue.to_parquet(path)
    code, out, err = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"),
                         "--items", str(path), "--items-cols", "department,brand")  # fmt: skip
    assert code == 0, err
    assert "values per column: department 3, brand 2" in " ".join(out.split())
    data = BasketData.load(tmp_path / "data")
    assert data.catalogue is not None and data.catalogue.columns == ("department", "brand")
    # codes follow the item index: the item's own value, 0 for the missing cell
    by_id = catalogue.set_index("item_id")
    for i, item in enumerate(data.item_ids.tolist()):
        dept, brand = by_id.loc[item, "department"], by_id.loc[item, "brand"]
        code_d, code_b = data.catalogue.codes[i]
        assert (code_d == 0) if pd.isna(dept) else data.catalogue.values[0][code_d - 1] == dept
        assert data.catalogue.values[1][code_b - 1] == brand
    config = tmp_path / "c.yaml"
    config.write_text("embed_dim: 8\nbatch_size: 32\nfusion: 'off'\ncatalogue_columns: [brand, department]\n")
    code, _, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "data"), "--config", str(config),
                       "--out", str(tmp_path / "run"), "--epochs", "2", "--no-progress")  # fmt: skip
    assert code == 0, err
    import torch

    state = torch.load(tmp_path / "run" / "best.pt", weights_only=False)
    codes = state["state_dict"]["item_codes"].numpy()
    assert np.array_equal(codes, data.catalogue.codes[:, [1, 0]])  # the configured order
    assert float(state["state_dict"]["catalogue.weight"].abs().sum()) > 0  # trained from 0
    code, out, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(tmp_path / "run" / "best.pt"),
                         "--data", str(tmp_path / "data"), "--k", "5", "--out", str(tmp_path / "r.parquet"))  # fmt: skip
    assert code == 0, err
    recs = pd.read_parquet(tmp_path / "r.parquet")
    assert len(recs) == 5 * data.n_users and set(recs["item_id"].astype(str)) <= set(data.item_ids.tolist())


def test_catalogue_columns_without_a_catalogue_is_a_clear_error(monkeypatch, capsys, log_csv, tmp_path):
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"))[0] == 0
    code, _, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "data"), "--set",
                       "catalogue_columns=[brand]", "--out", str(tmp_path / "run"), "--epochs", "1")  # fmt: skip
    assert code == 2 and "prepare ... --items" in " ".join(err.split())


def test_unknown_catalogue_column_in_the_model_names_the_available_ones(monkeypatch, capsys, log_csv, catalogue, tmp_path):
    catalogue.to_csv(tmp_path / "items.csv", index=False)
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"),
               "--items", str(tmp_path / "items.csv"))[0] == 0  # fmt: skip
    code, _, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "data"), "--set",
                       "catalogue_columns=[colour]", "--out", str(tmp_path / "run"), "--epochs", "1")  # fmt: skip
    text = " ".join(err.split())
    assert code == 2 and "'colour'" in text and "'department', 'brand', 'price'" in text


def _prepare_with(monkeypatch, capsys, log_csv, tmp_path, frame: pd.DataFrame, *flags: str):
    path = tmp_path / "items.csv"
    frame.to_csv(path, index=False)
    code, _, err = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"),
                       "--items", str(path), *flags)  # fmt: skip
    return code, " ".join(err.split())


def test_items_missing_from_the_catalogue_stop_or_become_unknown(monkeypatch, capsys, log_csv, catalogue, tmp_path):
    short = catalogue.iloc[2:]
    code, err = _prepare_with(monkeypatch, capsys, log_csv, tmp_path, short)
    assert code == 2 and not (tmp_path / "data").exists()
    assert "items.csv: 2 of the" in err and repr(str(catalogue.item_id[0])) in err
    assert "--items-missing unknown" in err
    code, err = _prepare_with(monkeypatch, capsys, log_csv, tmp_path, short, "--items-missing", "unknown")
    assert code == 0, err
    data = BasketData.load(tmp_path / "data")
    missing = np.isin(data.item_ids, catalogue.item_id[:2].astype(str))
    assert missing.sum() == 2 and (data.catalogue.codes[missing] == 0).all()
    assert (data.catalogue.select(["brand"])[~missing] > 0).all()
    assert json.loads((tmp_path / "data" / "meta.json").read_text())["catalogue"]["items_missing"] == 2


def test_duplicate_item_id_names_the_id_and_rows(monkeypatch, capsys, log_csv, catalogue, tmp_path):
    doubled = pd.concat([catalogue, catalogue.iloc[[3]]], ignore_index=True)
    code, err = _prepare_with(monkeypatch, capsys, log_csv, tmp_path, doubled)
    assert code == 2 and not (tmp_path / "data").exists()
    assert f"item id {str(catalogue.item_id[3])!r} appears twice" in err
    assert f"rows 4 and {len(doubled)}" in err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--items-id-col", "sku"], "no item id column 'sku'; the file has 'item_id', 'department', 'brand', 'price'"),
        (["--items-cols", "department,colour"], "no column 'colour'; the file has 'item_id'"),
        (["--items-missing", "maybe"], "--items-missing must be 'error' or 'unknown'"),
    ],
)
def test_unknown_catalogue_column_or_option_is_named(monkeypatch, capsys, log_csv, catalogue, tmp_path, flags, named):
    code, err = _prepare_with(monkeypatch, capsys, log_csv, tmp_path, catalogue, *flags)
    assert code == 2 and named in err and not (tmp_path / "data").exists()


def test_catalogue_file_that_is_not_a_table(monkeypatch, capsys, log_csv, tmp_path):
    (tmp_path / "items.txt").write_text("nope")
    code, _, err = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"),
                       "--items", str(tmp_path / "items.txt"))  # fmt: skip
    assert code == 2 and "must be a CSV or Parquet file" in " ".join(err.split())
