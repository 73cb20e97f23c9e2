"""The data commands (basketgnn/cli/data.py): `synth` writes a log, `prepare` reads a log or a
DNNTSP .json into a dataset folder: reports, a real export's options, the split file, and one
message + exit 2 + no output for each bad input or option."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from basketgnn.data.synth import generate_log, write_log
from tests.support.cli import run
from tests.support.ingest import EXPORT, EXPORT_ROWS

EXPORT_FLAGS = ["--customer-col", "CustomerID", "--item-col", "StockCode", "--basket-col",
                "InvoiceNo", "--time-col", "InvoiceDate", "--quantity-col", "Quantity"]  # fmt: skip


# --- synth -----------------------------------------------------------------------------------


def test_synth_writes_a_big_log_as_parts(tmp_path):
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
    assert isinstance(bad.exception, UserError) and "only plain, realistic-clean and grocery" in str(bad.exception)
    assert not (tmp_path / "x").exists()


def test_synth_grocery_preset_is_the_calibrated_settings(tmp_path):
    from typer.testing import CliRunner

    from basketgnn.cli import app
    from basketgnn.data.synth import GROCERY, generate_log

    result = CliRunner().invoke(app, ["synth", "--preset", "grocery", "--customers", "40", "--out", str(tmp_path / "g.csv")])
    assert result.exit_code == 0, result.output
    written = pd.read_csv(tmp_path / "g.csv", dtype={"quantity": "int64"}, parse_dates=["timestamp"])
    expected = generate_log(40, seed=0, **{k: v for k, v in GROCERY.items() if k != "n_customers"})
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)
    bad = CliRunner().invoke(app, ["synth", "--preset", "groceries", "--out", str(tmp_path / "y.csv")])
    assert "unknown --preset 'groceries'" in str(bad.exception)


# --- prepare: a transaction log ----------------------------------------------------------------


def test_prepare_with_random_split_file_is_reused(monkeypatch, capsys, log_csv, tmp_path):
    split = tmp_path / "split.json"
    code, _, _ = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"),
                     "--split-out", str(split), "--seed", "4")
    assert code == 0 and set(json.loads(split.read_text())["parts"]) == {"train", "validate", "test"}
    code, out, _ = run(monkeypatch, capsys, "evaluate", "--data", str(tmp_path / "ds"), "--model",
                       "g-topfreq", "--split-kind", str(split), "--output", str(tmp_path / "r.json"))
    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text())["split"] == "random(seed=4, fractions=0.8/0.1/0.1)"


def test_bad_row_is_reported_with_file_and_row(monkeypatch, capsys, tmp_path):
    path = tmp_path / "log.csv"
    pd.DataFrame(
        {"customer_id": ["a", "a", "a"], "basket_id": ["1", "2", "3"],
         "timestamp": ["2024-01-01", "2024-13-45", "2024-01-03"], "item_id": ["x", "y", "z"]}
    ).to_csv(path, index=False)
    code, _, err = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "log.csv row 2" in " ".join(err.split()) and not (tmp_path / "o").exists()
    code, _, err = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "o"),
                       "--on-bad-rows", "skip")
    assert code == 0 and "skipped 1 bad row" in " ".join(err.split())


def test_prepare_refuses_to_replace_a_folder_that_is_not_a_dataset(monkeypatch, capsys, log_csv, tmp_path):
    victim = tmp_path / "runs"
    (victim / "dnntsp").mkdir(parents=True)
    (victim / "dnntsp" / "best.pt").write_text("precious")
    code, _, err = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(victim))
    assert code == 2 and "refusing to replace it" in " ".join(err.split())
    assert (victim / "dnntsp" / "best.pt").read_text() == "precious"
    # a prepared dataset is replaced as asked
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))[0] == 0
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))[0] == 0


def test_demo_log_is_unchanged_by_default_options(monkeypatch, capsys, tmp_path):
    path = tmp_path / "log.csv"
    write_log(generate_log(n_customers=30, n_items=15, mean_baskets=4, seed=2), path)
    code, stdout, _ = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "ds"))
    assert code == 0 and "dropped" not in stdout and "cap" not in stdout
    report = json.loads((tmp_path / "ds" / "meta.json").read_text())["report"]
    assert not {"rows_dropped_where", "returns_excluded", "baskets_capped"} & set(report)


# --- prepare: a real export's shape (returns, --where, caps, float-written ids) ---------------


@pytest.fixture
def export_csv(tmp_path):
    path = tmp_path / "export.csv"
    pd.DataFrame(EXPORT_ROWS, columns=EXPORT).to_csv(path, index=False)
    return path


def test_export_options_are_applied_counted_and_reported(monkeypatch, capsys, export_csv, tmp_path):
    out = tmp_path / "ds"
    code, stdout, err = run(
        monkeypatch, capsys, "prepare", str(export_csv), "--out", str(out), *EXPORT_FLAGS,
        "--where", "StockCode NOT IN ('POST', 'M')", "--on-bad-rows", "skip",
        "--max-basket-items", "1", "--last-n", "5",
    )  # fmt: skip
    assert code == 0, err
    meta = json.loads((out / "meta.json").read_text())
    report = meta["report"]
    assert (report["rows_read"], report["rows_dropped_where"], report["returns_excluded"]) == (10, 2, 2)
    assert report["rows_skipped"] == 1 and report["baskets_capped"] == 1
    assert report["items_dropped_basket_cap"] == 1 and report["baskets_dropped_last_n"] == 0
    assert meta["options"]["where"] == "StockCode NOT IN ('POST', 'M')"
    assert meta["columns"]["quantity"] == "Quantity"
    assert "rows dropped by where: 2 of 10 read" in stdout
    assert "returns excluded (quantity <= 0): 2 rows" in stdout
    assert "basket cap: 1 baskets capped, 1 items dropped" in stdout


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--where", "StockCode NOT IN ('POST'"], r"--where \"StockCode NOT IN \('POST'\" is not usable: Parser Error"),
        (["--where", "Price > 1"], r"--where 'Price > 1' is not usable: Binder Error.*Price"),
        (["--max-basket-items", "-1"], r"--max-basket-items must be at least 1"),
        (["--time-format", "%Q"], r"--time-format '%Q' is not a strptime format"),
        (["--quantity-col", "Qty"], r"missing column\(s\) 'Qty'.*--quantity-col for 'Qty'"),
    ],
)  # fmt: skip
def test_bad_options_exit_2_with_one_message_and_no_output(monkeypatch, capsys, export_csv, tmp_path, extra, message):
    flags = EXPORT_FLAGS[:-2] + (["--quantity-col", "Quantity"] if "--quantity-col" not in extra else [])
    code, _, err = run(monkeypatch, capsys, "prepare", str(export_csv), "--out", str(tmp_path / "o"),
                       *flags, "--on-bad-rows", "skip", *extra)  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert re.search(message, " ".join(err.split()))
    assert not (tmp_path / "o").exists()


def test_bad_quantity_exits_2(monkeypatch, capsys, tmp_path):
    rows = [list(r) for r in EXPORT_ROWS]
    rows[4][2] = "three"
    path = tmp_path / "export.csv"
    pd.DataFrame(rows, columns=EXPORT).to_csv(path, index=False)
    code, _, err = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "o"),
                       *EXPORT_FLAGS)  # fmt: skip
    assert code == 2
    assert "export.csv row 5 (Quantity='three')" in " ".join(err.split())
    assert not (tmp_path / "o").exists()


def test_max_basket_items_0_is_no_cap(monkeypatch, capsys, export_csv, tmp_path):
    code, _, err = run(monkeypatch, capsys, "prepare", str(export_csv), "--out", str(tmp_path / "ds"),
                       *EXPORT_FLAGS, "--on-bad-rows", "skip", "--max-basket-items", "0")  # fmt: skip
    assert code == 0, err
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    assert meta["options"]["max_basket_items"] is None and "baskets_capped" not in meta["report"]


# --- prepare: a DNNTSP .json split -------------------------------------------------------------


@pytest.fixture
def dnntsp_json(tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({
        "train": {"u1": [[0, 1], [1]], "u2": [[2], [0, 2]]},
        "validate": {"u3": [[1], [2]]},
        "test": {"u4": [[0], [1], [2]]},
    }))  # fmt: skip
    return path


@pytest.mark.parametrize(
    "options, named",
    [
        (["--min-baskets", "3"], "--min-baskets applies"),
        (["--min-baskets", "2"], "--min-baskets applies"),  # given, even if equal to the default
        (["--min-item-baskets", "2", "--last-n", "5"], "--min-item-baskets, --last-n apply"),
        (["--max-baskets", "9"], "--max-baskets applies"),
        (["--customer-col", "c", "--item-col", "i", "--basket-col", "", "--time-col", "t"],
         "--customer-col, --item-col, --basket-col, --time-col apply"),
        (["--on-bad-rows", "skip"], "--on-bad-rows applies"),
    ],
)
def test_prepare_json_refuses_log_only_options(monkeypatch, capsys, dnntsp_json, tmp_path, options, named):
    out = tmp_path / "o"
    code, _, err = run(monkeypatch, capsys, "prepare", str(dnntsp_json), "--out", str(out), *options)
    message = " ".join(err.split())
    assert code == 2 and "Traceback" not in err
    assert f"split.json: {named} only to transaction logs" in message
    assert "used as published" in message and "Remove th" in message
    assert not out.exists()


def test_log_options_are_refused_for_a_dnntsp_json(monkeypatch, capsys, tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({p: {"u": [[0], [1]]} for p in ("train", "validate", "test")}))
    code, _, err = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "o"),
                       "--where", "TRUE", "--max-basket-items", "3")  # fmt: skip
    assert code == 2 and "--where, --max-basket-items apply only to transaction logs" in " ".join(err.split())


def test_prepare_json_without_log_options_keeps_the_published_split(monkeypatch, capsys, dnntsp_json, tmp_path):
    out = tmp_path / "o"
    code, stdout, _ = run(monkeypatch, capsys, "prepare", str(dnntsp_json), "--out", str(out),
                          "--split-out", str(tmp_path / "random.json"), "--seed", "1")
    assert code == 0 and "4 customers, 3 items, 9 baskets" in stdout
    from basketgnn.data.ingest import load_data

    assert load_data(out).user_part.tolist() == [0, 0, 1, 2]
