"""`basketgnn train` and `basketgnn config` (basketgnn/cli/train.py): the run folder (checkpoint,
log, split) of DNNTSP and of the sequential models, the nightly flags (--warm-start,
--sample-customers), and the model named in help, config and errors."""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.cli import run

ZOO = ["sasrec", "bert4rec", "din"]
TINY = "embed_dim: 8\nbatch_size: 64\nthreads: 1\nfusion: off\n"


def test_train_writes_checkpoint_log_and_split(trained):
    assert {"best.pt", "train_log.jsonl", "split.json", "resume.pt"} <= {p.name for p in trained.iterdir()}
    log = [json.loads(line) for line in (trained / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]


@pytest.mark.parametrize("model", ZOO)
def test_train_each_zoo_model_for_one_epoch(zoo_trained, model):
    run_dir, out = zoo_trained(model)
    assert f"training {model} on" in out and "best epoch" in out
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1]


def test_config_and_train_name_the_model(monkeypatch, capsys, log_csv, tmp_path):
    code, out, _ = run(monkeypatch, capsys, "config", "--model", "dnntsp")
    assert code == 0 and "embed_dim: 32" in out and "lr: 0.001" in out
    code, _, err = run(monkeypatch, capsys, "config", "--model", "tifu-knn")
    assert code == 2 and "unknown trainable model 'tifu-knn'" in err
    code, out, _ = run(monkeypatch, capsys, "train", "--help")
    assert "dnntsp (DNNTSP (Yu et al." in " ".join(out.replace("│", " ").split())
    run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))
    code, _, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "ds"), "--model", "nope")
    assert code == 2 and "--model: unknown trainable model 'nope'; choose one of dnntsp" in err


def test_train_warm_started_on_a_sample_then_wrong_model_is_exit_2(monkeypatch, capsys, tmp_path, log_csv):
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"))[0] == 0
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    common = ["--data", str(tmp_path / "data"), "--config", str(config), "--epochs", "1", "--no-progress"]
    code, _, err = run(monkeypatch, capsys, "train", *common, "--out", str(tmp_path / "day1"))
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "train", *common, "--out", str(tmp_path / "day2"),
                         "--warm-start", str(tmp_path / "day1" / "best.pt"), "--sample-customers", "60")
    assert code == 0, err
    assert "training on a sample of 60 of 150 customers (seed 0)" in out
    assert f"warm start from {(tmp_path / 'day1' / 'best.pt').resolve()}" in out
    assert "items kept, 0 new, 0 dropped" in out
    extras = torch.load(tmp_path / "day2" / "best.pt", weights_only=False)["extras"]
    assert extras["warm_start"]["items_new"] == 0
    # The saved split holds the sample's training customers only, and every test customer.
    split = json.loads((tmp_path / "day2" / "split.json").read_text())
    assert len(set(split["parts"]["train"]) | set(split["parts"]["validate"])) <= 60
    assert len(split["parts"]["test"]) == len(json.loads((tmp_path / "day1" / "split.json").read_text())["parts"]["test"])

    code, out, err = run(monkeypatch, capsys, "train", "--model", "din", *common[:2], "--epochs", "1",
                         "--no-progress", "--out", str(tmp_path / "din"),
                         "--warm-start", str(tmp_path / "day1" / "best.pt"))
    assert code == 2 and "a dnntsp checkpoint, but this run trains din" in err
    assert not (tmp_path / "din" / "best.pt").exists()


def test_train_preset_paper_with_set_overrides(monkeypatch, capsys, tmp_path, log_csv):
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"))[0] == 0
    common = ["--data", str(tmp_path / "data"), "--no-progress", "--out", str(tmp_path / "run")]
    code, out, err = run(monkeypatch, capsys, "train", *common, "--preset", "paper",
                         "--set", "epochs=1", "--set", "embed_dim=8", "--set", "threads=1")
    assert code == 0, err
    config = torch.load(tmp_path / "run" / "best.pt", weights_only=False)["config"]
    assert (config["batch_order"], config["lr_patience"], config["batchnorm_padding"]) == ("ordered", 10, True)
    assert (config["embed_dim"], config["epochs"], config["presence"]) == (8, 1, False)
    code, _, err = run(monkeypatch, capsys, "train", *common, "--preset", "papr", "--model", "sasrec")
    assert code == 2 and "--preset: sasrec has no preset 'papr' (choose one of default, paper)" in err
    code, _, err = run(monkeypatch, capsys, "train", *common, "--set", "epochs")
    assert code == 2 and "--set 'epochs': write KEY=VALUE" in err


def test_train_with_rerank_says_what_validation_chose_and_recommend_reads_it(monkeypatch, capsys, tmp_path, log_csv):
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "data"))[0] == 0
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY.replace("fusion: off", "rerank: true"))
    code, out, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "data"), "--config", str(config),
                         "--epochs", "1", "--no-progress", "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("re-ranking of TIFU-KNN's top"))
    assert "validation criterion" in line and ("kept" in line)
    section = torch.load(tmp_path / "run" / "best.pt", weights_only=False)["sections"]["rerank"]
    assert section["choice"]["description"] == " ".join(line.split())
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(tmp_path / "run" / "best.pt"),
                       "--out", str(tmp_path / "r.parquet"), "--k", "5")  # fmt: skip
    assert code == 0, err
    import pandas as pd

    from basketgnn import workflow
    from basketgnn.data.ingest import load_data
    from basketgnn.recommenders.reranked import RerankedRecommender

    recs = pd.read_parquet(tmp_path / "r.parquet")
    n_users = load_data(tmp_path / "data").n_users
    assert len(recs) == 5 * n_users
    loaded = workflow.load_trained(tmp_path / "run" / "best.pt")
    assert isinstance(loaded, RerankedRecommender) == section["choice"]["kept"]
    # fusion: off cannot re-rank (the stage reads TIFU-KNN's parts): a clear error, exit 2.
    config.write_text(TINY + "rerank: true\n")
    code, _, err = run(monkeypatch, capsys, "train", "--data", str(tmp_path / "data"), "--config", str(config),
                       "--epochs", "1", "--no-progress", "--out", str(tmp_path / "off"))  # fmt: skip
    assert code == 2 and "rerank: true reads TIFU-KNN's parts; it needs fusion: tifu" in err
    assert not (tmp_path / "off" / "best.pt").exists()
