"""The ablation spec (basketgnn/experiments/ablation_spec.py): one user error naming the problem
for each bad spec, the shipped spec, and the dataset hash that tells finished runs from
pending ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from basketgnn.data.dataset import BasketData
from basketgnn.errors import UserError
from basketgnn.experiments.ablation_spec import dataset_hash, load_spec
from tests.support.ablation import write_spec


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"epochs": 3}, r"ablation\.yaml: epochs: unknown key \(valid: out, datasets, model, seeds, "),
            ({"variants": {"x": {"model": "dnntps"}}}, "variant 'x': model: unknown trainable model 'dnntps'"),
            ({"model": "g-topfreq"}, "model: unknown trainable model 'g-topfreq'"),
        ({"seeds": ["a"]}, r"ablation\.yaml: seeds\[0\]: Input should be a valid integer.*\(got 'a'\)"),
        ({"datasets": {"DC": "missing/DC.json"}}, r"dataset 'DC': missing/DC\.json not found"),
        ({"variants": {"bad": {"gcn_depth": 2}}}, r"variant 'bad'.*gcn_depth"),
        ({"variants": {"no-gate": {"gate": False}}}, r"gate: False is a YAML boolean; quote"),
        ({"variants": {"full": {"seed": 3}}}, "'seed' is set per run by `seeds`"),
        ({"base": {"epochs": 2, "lr": -1}}, r"base: invalid config \(lr: "),
        ({"baselines": ["top-pop"]}, "unknown baseline 'top-pop'"),
        ({"metrics_in_table": ["recall@5"]}, r"unknown metric\(s\) \['recall@5'\]"),
        ({"seeds": [0, 0]}, "seeds repeat a value"),
    ],
)


def test_bad_spec_is_a_user_error_naming_the_problem(tmp_path, dataset, changes, match):
    with pytest.raises(UserError, match=match):
        load_spec(write_spec(tmp_path, dataset, **changes))


def test_the_shipped_spec_is_valid():
    spec = Path(__file__).resolve().parents[2] / "pipelines" / "ablation.yaml"
    raw = yaml.safe_load(spec.read_text())
    assert set(raw["variants"]) == {
        "full", "no-gcn", "no-attention", "last-timestamp", "no-gate", "no-repeat-features",
        "no-transitions", "no-rerank", "no-item-pairs", "no-fusion",
    }
    assert raw["variants"]["no-gate"] == {"gate": "off"}
    assert raw["variants"]["no-fusion"] == {"fusion": "off"}
    assert raw["variants"]["no-rerank"] == {"rerank": False} and raw["variants"]["no-item-pairs"] == {"rerank_pairs": 0}
    if all((spec.parent / p).exists() for p in raw["datasets"].values()):
        grid = load_spec(spec)
        assert len(grid.runs) == 2 * (3 + 10 * 3)
        assert grid.out == (spec.parent.parent / "docs" / "ablation").resolve()


def test_dataset_hash_is_the_content_of_a_file_or_of_a_folders_arrays(tmp_path, dataset):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"train": {"u": [[1], [2]]}, "validate": {}, "test": {}}')
    b.write_bytes(a.read_bytes())
    assert dataset_hash(a) == dataset_hash(b)
    b.write_text(a.read_text().replace("[2]", "[3]"))
    assert dataset_hash(a) != dataset_hash(b)
    # a folder: its arrays, whatever meta.json says about where they came from
    copy = tmp_path / "copy"
    data = BasketData.load(dataset)
    data.meta["source"] = "elsewhere.csv"
    data.save(copy)
    assert dataset_hash(copy) == dataset_hash(dataset)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty is not a readable prepared dataset folder"):
        dataset_hash(tmp_path / "empty")
