"""The DNNTSP commands end to end: train -> evaluate --checkpoint -> predict -> recommend."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from basketgnn.engine.checkpoint import load_checkpoint
from tests.support.cli import run, run_ok


@pytest.fixture(scope="module")
def trained(tmp_path_factory, log_csv):
    """A tiny run with the fusion with TIFU-KNN (the default), chosen and stored in the checkpoint."""
    folder = tmp_path_factory.mktemp("run")
    config = folder / "small.yaml"
    config.write_text("embed_dim: 8\nbatch_size: 32\nfusion: tifu\n")
    run_ok("prepare", str(log_csv), "--out", str(folder / "data"))
    run_ok("train", "--data", str(folder / "data"), "--config", str(config),
           "--out", str(folder / "out"), "--epochs", "2", "--no-progress")
    return folder / "out"


def test_train_writes_checkpoint_log_and_split(trained):
    assert {"best.pt", "train_log.jsonl", "split.json", "resume.pt"} <= {p.name for p in trained.iterdir()}
    log = [json.loads(line) for line in (trained / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]


def test_evaluate_checkpoint_has_the_baseline_keys(monkeypatch, capsys, trained, tmp_path):
    out = tmp_path / "dnntsp.json"
    code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint", str(trained / "best.pt"),
                       "--output", str(out))
    assert code == 0, err
    result = json.loads(out.read_text())
    assert {"recall@10", "ndcg@10", "phr@10"} <= set(result["metrics"])
    choice = load_checkpoint(trained / "best.pt").sections["fusion"]["choice"]
    assert 0 <= choice["weight"] <= 1 and len(choice["grid"]) > 1
    # The record says what the fusion uses exactly when validation chose one.
    assert ("fusion_used" in result["params"]) == (choice["weight"] > 0)
    if choice["weight"] > 0:
        assert result["params"]["fusion_used"]["weight"] == choice["weight"]
    code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint", str(trained / "best.pt"),
                       "--model-only", "--output", str(out))
    assert code == 0, err
    alone = json.loads(out.read_text())
    assert alone["model"] == "dnntsp (model only)" and "fusion_used" not in alone["params"]


def test_predict_for_a_customer_and_for_a_typed_history(monkeypatch, capsys, trained, log_csv):
    customer = str(pd.read_csv(log_csv)["customer_id"].iloc[0])
    code, out, err = run(monkeypatch, capsys, "predict", "--checkpoint", str(trained / "best.pt"),
                         "--user", customer, "--k", "5")
    assert code == 0, err
    assert out.count("\n") >= 5 and "next basket" in out
    item = str(pd.read_csv(log_csv)["item_id"].iloc[0])
    code, out, err = run(monkeypatch, capsys, "predict", "--checkpoint", str(trained / "best.pt"),
                         "--history", json.dumps([[item, "no-such-item"], [item]]), "--k", "3")
    assert code == 0 and "1 unknown item id(s) ignored: no-such-item" in err
    assert "next basket (2 past baskets)" in out


def test_recommend_writes_top_k_for_every_customer(monkeypatch, capsys, trained, log_csv, tmp_path):
    out = tmp_path / "recs.parquet"
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(trained / "best.pt"),
                       "--out", str(out), "--k", "7")
    assert code == 0, err
    recs = pd.read_parquet(out)
    customers = pd.read_csv(log_csv)["customer_id"].astype(str).unique()
    assert list(recs.columns) == ["customer_id", "item_id", "rank", "score"]
    assert len(recs) == 7 * len(customers) and set(recs["customer_id"].astype(str)) == set(customers)
    assert (recs.groupby("customer_id")["score"].diff().dropna() <= 0).all()


def test_demo_publishes_metrics_and_recommendations_together(tmp_path, log_csv, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text("embed_dim: 8\nepochs: 2\n")
    out = tmp_path / "demo"
    run_ok("demo", "--out", str(out), "--log", str(log_csv), "--config", str(config), "--no-progress")
    assert "fusion with TIFU-KNN: " in capsys.readouterr().out  # the validation choice is shown
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "recommendations.parquet", "recommendations.csv", "data", "dnntsp"} == names
    records = json.loads((out / "metrics.json").read_text())
    assert [r["model"] for r in records][-1] == "dnntsp"
    recs = pd.read_parquet(out / "recommendations.parquet")
    assert len(recs) == len(pd.read_csv(out / "recommendations.csv")) > 0


def test_demo_without_a_terminal_writes_one_line_per_epoch_and_no_redraws(tmp_path, log_csv, capsys):
    # Progress stays on (the default): with no TTY on stdout / stderr (pytest captures both)
    # there are no bars, only lines, as in `basketgnn demo > log 2>&1`.
    config = tmp_path / "tiny.yaml"
    config.write_text("embed_dim: 8\nepochs: 6\npatience: 100\n")
    run_ok("demo", "--out", str(tmp_path / "demo"), "--log", str(log_csv), "--config", str(config))
    captured = capsys.readouterr()
    log = captured.out + captured.err
    assert "\r" not in log and len(log.encode()) < 20_000
    epoch_lines = [line for line in log.splitlines() if line.lstrip().startswith("epoch ")]
    assert len(epoch_lines) == 6 and all(line.rstrip().endswith(("s]", "best")) for line in epoch_lines)
    assert all(re.search(r"\[\s*\d+s\]", line) for line in epoch_lines)  # elapsed time


def test_train_evaluate_and_config_name_the_model(monkeypatch, capsys, log_csv, tmp_path):
    code, out, _ = run(monkeypatch, capsys, "config", "--model", "dnntsp")
    assert code == 0 and "embed_dim: 32" in out and "lr: 0.001" in out
    code, _, err = run(monkeypatch, capsys, "config", "--model", "tifu-knn")
    assert code == 2 and "unknown trainable model 'tifu-knn'" in err
    code, out, _ = run(monkeypatch, capsys, "train", "--help")
    assert "dnntsp (DNNTSP (Yu et al." in " ".join(out.replace("│", " ").split())
    run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))
    config = tmp_path / "tiny.yaml"
    config.write_text("embed_dim: 8\nepochs: 2\nfusion: off\n")
    result = tmp_path / "dnntsp.json"
    code, out, err = run(monkeypatch, capsys, "evaluate", "--data", str(tmp_path / "ds"), "--model",
                         "dnntsp", "--config", str(config), "--output", str(result))
    assert code == 0, err
    record = json.loads(result.read_text())
    assert record["model"] == "dnntsp" and record["params"]["epochs"] == 2
    assert record["params"]["best_epoch"] in (1, 2) and 0 < record["metrics"]["recall@10"] <= 1
    assert not (tmp_path / "runs").exists()  # evaluate --model trains in memory only
    code, _, err = run(monkeypatch, capsys, "evaluate", "--data", str(tmp_path / "ds"), "--model",
                       "p-topfreq", "--config", str(config))
    assert code == 2 and "--config sets the options of a neural --model" in err
    code, _, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "ds"), "--model", "nope")
    assert code == 2 and "--model: unknown trainable model 'nope'; choose one of dnntsp" in err
