"""`basketgnn prepare` on a real-export shape: returns, --where, caps, float-written ids, and one
message + exit 2 + no output for each bad option."""

from __future__ import annotations

import json
import re

import pytest

from basketgnn.data.synth import generate_log, write_log
from tests.support.cli import run
from tests.support.ingest import EXPORT, EXPORT_ROWS

EXPORT_FLAGS = ["--customer-col", "CustomerID", "--item-col", "StockCode", "--basket-col",
                "InvoiceNo", "--time-col", "InvoiceDate", "--quantity-col", "Quantity"]  # fmt: skip


@pytest.fixture
def export_csv(tmp_path):
    import pandas as pd

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
    import pandas as pd

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


def test_log_options_are_refused_for_a_dnntsp_json(monkeypatch, capsys, tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({p: {"u": [[0], [1]]} for p in ("train", "validate", "test")}))
    code, _, err = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "o"),
                       "--where", "TRUE", "--max-basket-items", "3")  # fmt: skip
    assert code == 2 and "--where, --max-basket-items apply only to transaction logs" in " ".join(err.split())


def test_demo_log_is_unchanged_by_default_options(monkeypatch, capsys, tmp_path):
    path = tmp_path / "log.csv"
    write_log(generate_log(n_customers=30, n_items=15, mean_baskets=4, seed=2), path)
    code, stdout, _ = run(monkeypatch, capsys, "prepare", str(path), "--out", str(tmp_path / "ds"))
    assert code == 0 and "dropped" not in stdout and "cap" not in stdout
    report = json.loads((tmp_path / "ds" / "meta.json").read_text())["report"]
    assert not {"rows_dropped_where", "returns_excluded", "baskets_capped"} & set(report)
