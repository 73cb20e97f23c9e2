"""Adding a model is one folder: a tiny model package registered by the tests alone
(tests/support/tiny_model) is trained, fused with TIFU-KNN, evaluated, recommended from its
checkpoint, run by a pipeline YAML and compared in an ablation grid, with no other change to
basketgnn.

Everything runs in this process: a registration made with monkeypatch reaches no subprocess.
"""

from __future__ import annotations

import io
import json
import os

import pytest
import yaml
from rich.console import Console

from basketgnn import registry, workflow
from basketgnn.data.synth import generate_log, write_log
from basketgnn.engine.checkpoint import load_checkpoint
from basketgnn.errors import UserError
from basketgnn.experiments.ablation import ablate, load_spec
from basketgnn.pipeline.run import run_pipeline
from tests.support.planted import planted_data

TINY = ("tests.support.tiny_model", "a tiny test model")
OPTIONS = {"dim": 8, "epochs": 3, "lr": 0.05, "threads": 1}


@pytest.fixture(scope="module", autouse=True)
def tiny_registered():
    """The one registration line, for this module's tests only; torch threads restored after."""
    import torch

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry.NEURAL, "tiny", TINY)
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data():
    data = planted_data(n_users=200, n_items=50)
    return data, workflow.split(data, "temporal")


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    entry = workflow.ModelEntry("tiny", OPTIONS, out_dir=out)
    return out, workflow.train(entry, data[0], data[1])


def test_it_trains_and_is_fused_with_tifu_knn_chosen_on_validation(trained):
    out, outcome = trained
    epochs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert outcome.training.epochs_run == 3 and 1 <= outcome.training.best_epoch <= 3
    ckpt = load_checkpoint(out / "best.pt")
    assert ckpt.model_name == "tiny" and ckpt.config.dim == 8
    choice = ckpt.sections["fusion"]["choice"]  # the default FusionOptions: TIFU-KNN
    assert 0 <= choice["weight"] <= 1 and choice["k"] >= 1
    assert outcome.fusion == choice


def test_it_evaluates_and_fused_beats_global_popularity_on_planted_favourites(trained, data):
    _, outcome = trained
    result = workflow.evaluate(outcome, *data, "test", "planted")
    assert result.model == "tiny" and result.part == "test" and result.n_users == 200
    assert result.best_epoch == outcome.training.best_epoch and result.epochs_run == 3
    assert set(result.fusion) == {"weight", "k"}
    popular = workflow.train(workflow.ModelEntry("g-topfreq"), *data)
    reference = workflow.evaluate(popular, *data, "test")
    assert result.metrics["recall@10"] > reference.metrics["recall@10"]


def test_it_recommends_from_its_checkpoint_for_every_customer(trained, data):
    out, outcome = trained
    loaded = workflow.load_trained(out / "best.pt")
    rows = workflow.recommend(loaded, data[0], k=5)
    assert sorted(rows["customer_id"].unique()) == sorted(data[0].user_ids)
    assert (rows.groupby("customer_id")["rank"].apply(list) == [[1, 2, 3, 4, 5]] * 200).all()
    # The checkpoint ranks as the model trained in this process does, fused and alone.
    columns = ["customer_id", "item_id", "rank"]
    in_memory = workflow.recommend(outcome.recommender, data[0], k=5)
    assert rows[columns].equals(in_memory[columns])
    alone = workflow.load_trained(out / "best.pt", model_only=True)
    shipped = getattr(outcome.recommender, "shipped", outcome.recommender)  # inside a re-ranking stage
    base = getattr(shipped, "base", shipped)
    assert workflow.recommend(alone, data[0], k=5)[columns].equals(
        workflow.recommend(base, data[0], k=5)[columns]
    )


def test_it_runs_in_a_pipeline_yaml(tmp_path):
    log = tmp_path / "log.csv"
    write_log(generate_log(n_customers=120, n_items=45, mean_baskets=5, seed=0), log)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "run_dir": "run",
        "input": {"path": os.path.relpath(log, tmp_path)},
        "models": {"baselines": ["p-topfreq"], "tiny": OPTIONS},
        "recommend": {"k": 5, "model": "tiny"},
        "report": {"title": "tiny"},
    }))  # fmt: skip
    console = Console(file=io.StringIO(), width=200)
    summary = run_pipeline(job, progress=False, console=console)
    assert [s["name"] for s in summary["stages"]] == [
        "prepare", "split", "fit_tiny", "evaluate", "recommend", "report",
    ]  # fmt: skip
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [m["model"] for m in metrics["models"]] == ["p-topfreq", "tiny"]
    recommendations = (tmp_path / "run" / "recommendations.csv").read_text().splitlines()
    assert len(recommendations) == 1 + 5 * 120


def test_it_is_compared_in_an_ablation_grid(tmp_path, data):
    folder = tmp_path / "ds"
    data[0].save(folder)
    spec = tmp_path / "ablation.yaml"
    spec.write_text(yaml.safe_dump({
        "out": "out",
        "datasets": {"planted": str(folder)},
        "model": "tiny",
        "split": "temporal",
        "base": {"epochs": 2, "threads": 1, "lr": 0.05},
        "variants": {"dim4": {"dim": 4}, "dim8": {"dim": 8}},
        "baselines": ["p-topfreq"],
        "metrics_in_table": ["recall@10", "ndcg@10"],
    }))  # fmt: skip
    outputs = ablate(spec)
    assert [(r["variant"], r["kind"], r["model"]) for r in outputs.results] == [
        ("p-topfreq", "baseline", "p-topfreq"), ("dim4", "tiny", "tiny"), ("dim8", "tiny", "tiny"),
    ]  # fmt: skip
    assert [r["config"].get("dim") for r in outputs.results] == [None, 4, 8]
    assert all(r["fusion"] is not None for r in outputs.results[1:])
    table = outputs.table.read_text()
    assert "| dim4 | 1 |" in table and "| dim8 | 1 |" in table


def test_its_own_config_checks_an_ablation_spec(tmp_path, data):
    spec = tmp_path / "ablation.yaml"
    folder = tmp_path / "ds"
    data[0].save(folder)
    spec.write_text(yaml.safe_dump({
        "out": "out", "datasets": {"planted": str(folder)}, "model": "tiny",
        "variants": {"bad": {"gcn": False}},
    }))  # fmt: skip
    with pytest.raises(UserError, match=r"variant 'bad'.*gcn: unknown key \(valid: .*dim"):
        load_spec(spec)
