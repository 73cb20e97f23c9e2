"""SASRec, BERT4Rec and DIN through the CLI: `train --model NAME` -> `evaluate --checkpoint`
(-> `--model-only`) -> `recommend`, on tiny data (one epoch, small dimensions)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.support.cli import run, run_status

TINY = {
    "sasrec": "dim: 8\nffn_dim: 8\nblocks: 1\n",
    "bert4rec": "dim: 8\nffn_dim: 16\nblocks: 1\n",
    "din": "dim: 8\nattention_hidden: [8]\nhidden: [16]\n",
}


def _train(monkeypatch, capsys, folder, model: str, fusion: str) -> None:
    """One epoch of MODEL with the add-on FUSION into folder/MODEL-FUSION (once per module)."""
    if (folder / f"{model}-{fusion}" / "best.pt").exists():
        return
    config = folder / f"{model}-{fusion}.yaml"
    config.write_text(TINY[model] + f"batch_size: 64\nthreads: 1\nfusion: {fusion}\n")
    code, out, err = run(monkeypatch, capsys, "train", "--model", model, "--data", str(folder / "data"),
                         "--config", str(config), "--out", str(folder / f"{model}-{fusion}"),
                         "--epochs", "1", "--seed", "0", "--no-progress")
    assert code == 0, err
    assert f"training {model} on" in out and "best epoch" in out


@pytest.fixture(scope="module")
def folder(tmp_path_factory, log_csv):
    folder = tmp_path_factory.mktemp("zoo")
    assert _prepare(folder, log_csv) == 0
    return folder


def _prepare(folder, log_csv) -> int:
    return run_status("prepare", str(log_csv), "--out", str(folder / "data"))


@pytest.mark.parametrize("model", ["sasrec", "bert4rec", "din"])
def test_train_evaluate_and_recommend_each_zoo_model(monkeypatch, capsys, folder, log_csv, model):
    _train(monkeypatch, capsys, folder, model, "off")
    run_dir = folder / f"{model}-off"
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1]
    out = folder / f"{model}.json"
    code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint", str(run_dir / "best.pt"),
                       "--output", str(out))
    assert code == 0, err
    record = json.loads(out.read_text())
    assert record["model"] == model
    for k in (10, 20):
        for m in ("recall", "ndcg", "phr"):
            assert 0 <= record["metrics"][f"{m}@{k}"] <= 1
    recs = folder / f"{model}-recs.csv"
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(run_dir / "best.pt"),
                       "--out", str(recs), "--k", "5")
    assert code == 0, err
    customers = pd.read_csv(log_csv)["customer_id"].astype(str).unique()
    assert len(pd.read_csv(recs)) == 5 * len(customers)


def test_model_only_ranks_a_fused_checkpoint_by_the_model_alone(monkeypatch, capsys, folder):
    """The add-on is chosen after training, so a `fusion: tifu` run and a `fusion: off` run of
    the same seed hold the same weights: `--model-only` on the first must score as the second."""
    _train(monkeypatch, capsys, folder, "sasrec", "off")
    _train(monkeypatch, capsys, folder, "sasrec", "tifu")
    results = {}
    for name, flags in (("off", []), ("tifu", ["--model-only"])):
        out = folder / f"only-{name}.json"
        code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint",
                           str(folder / f"sasrec-{name}" / "best.pt"), *flags, "--output", str(out))
        assert code == 0, err
        results[name] = json.loads(out.read_text())
    assert results["tifu"]["model"] == "sasrec (model only)"
    assert "fusion_used" not in results["tifu"]["params"]
    assert results["tifu"]["metrics"] == results["off"]["metrics"]


def test_model_only_needs_a_checkpoint(monkeypatch, capsys, folder):
    code, _, err = run(monkeypatch, capsys, "evaluate", "--data", str(folder / "data"), "--model",
                       "p-topfreq", "--model-only")
    assert code == 2 and "--model-only applies to a --checkpoint" in err
