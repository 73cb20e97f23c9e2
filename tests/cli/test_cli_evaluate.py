"""`basketgnn evaluate` (basketgnn/cli/evaluate.py): a baseline on a prepared dataset, a neural
model trained in memory, and a trained checkpoint (DNNTSP fused with TIFU-KNN, the sequential
models, `--model-only`): the JSON record and its metric keys."""

from __future__ import annotations

import json

import pytest

from basketgnn.engine.checkpoint import load_checkpoint
from tests.support.cli import run

ZOO = ["sasrec", "bert4rec", "din"]


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


def test_evaluate_trains_a_neural_model_in_memory_with_its_config(monkeypatch, capsys, log_csv, tmp_path):
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
    # The record says what validation chose, the model alone (weight 0) included.
    assert result["params"]["fusion_used"]["weight"] == choice["weight"]
    code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint", str(trained / "best.pt"),
                       "--model-only", "--output", str(out))
    assert code == 0, err
    alone = json.loads(out.read_text())
    assert alone["model"] == "dnntsp (model only)" and "fusion_used" not in alone["params"]


@pytest.mark.parametrize("model", ZOO)
def test_evaluate_each_zoo_checkpoint(monkeypatch, capsys, zoo_trained, tmp_path, model):
    run_dir, _ = zoo_trained(model)
    out = tmp_path / f"{model}.json"
    code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint", str(run_dir / "best.pt"),
                       "--output", str(out))
    assert code == 0, err
    record = json.loads(out.read_text())
    assert record["model"] == model
    for k in (10, 20):
        for m in ("recall", "ndcg", "phr"):
            assert 0 <= record["metrics"][f"{m}@{k}"] <= 1


def test_model_only_ranks_a_fused_checkpoint_by_the_model_alone(monkeypatch, capsys, zoo_trained, tmp_path):
    """The add-on is chosen after training, so a `fusion: tifu` run and a `fusion: off` run of
    the same seed hold the same weights: `--model-only` on the first must score as the second."""
    runs = {"off": zoo_trained("sasrec", "off")[0], "tifu": zoo_trained("sasrec", "tifu")[0]}
    results = {}
    for name, flags in (("off", []), ("tifu", ["--model-only"])):
        out = tmp_path / f"only-{name}.json"
        code, _, err = run(monkeypatch, capsys, "evaluate", "--checkpoint",
                           str(runs[name] / "best.pt"), *flags, "--output", str(out))
        assert code == 0, err
        results[name] = json.loads(out.read_text())
    assert results["tifu"]["model"] == "sasrec (model only)"
    assert "fusion_used" not in results["tifu"]["params"]
    assert results["tifu"]["metrics"] == results["off"]["metrics"]


def test_model_only_needs_a_checkpoint(monkeypatch, capsys, zoo_folder):
    code, _, err = run(monkeypatch, capsys, "evaluate", "--data", str(zoo_folder / "data"), "--model",
                       "p-topfreq", "--model-only")
    assert code == 2 and "--model-only applies to a --checkpoint" in err
