"""The command line: outputs users rely on, and one clean message + exit 2 for every user error."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from tests.support.cli import run


def test_prepare_then_evaluate_writes_json_with_all_metric_keys(monkeypatch, capsys, log_csv, tmp_path):
    code, out, _ = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))
    assert code == 0 and "150 customers" in out
    result = tmp_path / "res.json"
    code, out, _ = run(
        monkeypatch, capsys, "evaluate", "--data", str(tmp_path / "ds"), "--model", "p-topfreq",
        "--output", str(result),
    )
    assert code == 0 and "recall@10" in out
    record = json.loads(result.read_text())
    assert record["model"] == "p-topfreq" and record["split"].startswith("temporal")
    for k in (10, 20, 30, 40):
        for m in ("recall", "ndcg", "phr"):
            for prefix in ("", "repeat_", "explore_"):
                assert f"{prefix}{m}@{k}" in record["metrics"]
    assert 0 < record["metrics"]["recall@10"] <= 1
    assert {"fit", "score"} <= set(record["timing_s"])


def test_prepare_with_random_split_file_is_reused(monkeypatch, capsys, log_csv, tmp_path):
    split = tmp_path / "split.json"
    code, _, _ = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"),
                     "--split-out", str(split), "--seed", "4")
    assert code == 0 and set(json.loads(split.read_text())["parts"]) == {"train", "validate", "test"}
    code, out, _ = run(monkeypatch, capsys, "evaluate", "--data", str(tmp_path / "ds"), "--model",
                       "g-topfreq", "--split-kind", str(split), "--output", str(tmp_path / "r.json"))
    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text())["split"] == "random(seed=4, fractions=0.8/0.1/0.1)"


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "--data", "{ds}", "--model", "nope"], "unknown model 'nope'; choose one of .*dnntsp"),
        (["evaluate", "--data", "{tmp}/missing", "--model", "p-topfreq"], "no such file or folder"),
        (["evaluate", "--data", "{ds}"], "Name exactly one model"),
        (["prepare", "{log}", "--out", "{tmp}/o", "--customer-col", "cust"], "missing column"),
        (["prepare", "{tmp}/bad.txt", "--out", "{tmp}/o"], "not a CSV or Parquet file"),
        (["prepare", "{log}", "--out", "{tmp}/o", "--min-baskets", "50"], "No customer is left"),
        (["evaluate", "--checkpoint", "{tmp}/none.pt"], "no such checkpoint"),
        (["train", "--data", "{ds}", "--config", "{tmp}/bad.yaml"], "invalid config .*embed_dims"),
    ],
)
def test_user_errors_exit_2_with_one_message_and_no_output(
    monkeypatch, capsys, log_csv, tmp_path, args, message
):
    ds = tmp_path / "ds"
    run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(ds))
    (tmp_path / "bad.txt").write_text("a,b\n1,2\n")
    (tmp_path / "bad.yaml").write_text("embed_dims: 8\n")
    filled = [a.format(ds=ds, tmp=tmp_path, log=log_csv) for a in args]
    code, _, err = run(monkeypatch, capsys, *filled)
    assert code == 2
    assert "error:" in err and "Traceback" not in err
    assert re.search(message, " ".join(err.split()))
    assert not (tmp_path / "o").exists()


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


@pytest.mark.parametrize(
    "content, message",
    [('{"train": [], "validate": {}, "test": {}}', "'train' must map user ids"),
     ('{"train": {"u": [["a"]]}, "validate": {}, "test": {}}', "user 'u' in 'train' is not a list")],
)
def test_malformed_dnntsp_json(monkeypatch, capsys, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, _, err = run(monkeypatch, capsys, "evaluate", "--data", str(path), "--model", "g-topfreq")
    assert code == 2 and message in " ".join(err.split())


def test_bad_config_combinations_and_k(monkeypatch, capsys, tmp_path):
    from basketgnn.errors import UserError
    from basketgnn.workflow.config import load_config

    with pytest.raises(UserError, match="embed_dim 30 must be divisible by heads 4"):
        load_config(None, embed_dim=30)
    with pytest.raises(UserError, match="device"):
        load_config(None, device="bogus")
    code, _, _ = run(monkeypatch, capsys, "predict", "--checkpoint", "x.pt", "--user", "u", "--k", "0")
    assert code == 2


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


def test_prepare_json_without_log_options_keeps_the_published_split(monkeypatch, capsys, dnntsp_json, tmp_path):
    out = tmp_path / "o"
    code, stdout, _ = run(monkeypatch, capsys, "prepare", str(dnntsp_json), "--out", str(out),
                          "--split-out", str(tmp_path / "random.json"), "--seed", "1")
    assert code == 0 and "4 customers, 3 items, 9 baskets" in stdout
    from basketgnn.data.ingest import load_data

    assert load_data(out).user_part.tolist() == [0, 0, 1, 2]
