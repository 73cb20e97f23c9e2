"""pipelines/example.yaml documents every input key of a job, and loads as a valid job."""

from __future__ import annotations

from pathlib import Path

import yaml

from basketgnn.pipeline.schema import ColumnsSpec, InputSpec, load_job

EXAMPLE = Path(__file__).resolve().parents[2] / "pipelines" / "example.yaml"


def test_example_sets_every_input_and_column_key():
    raw = yaml.safe_load(EXAMPLE.read_text())
    assert set(raw["input"]) == set(InputSpec.model_fields)
    assert set(raw["input"]["columns"]) == set(ColumnsSpec.model_fields)
    job = load_job(EXAMPLE)
    assert job.spec.input.where is None and job.spec.input.max_basket_items is None


def test_example_documents_the_nightly_keys():
    from basketgnn.pipeline.schema import NeighboursSpec, TrainSpec

    raw = yaml.safe_load(EXAMPLE.read_text())
    assert set(raw["train"]) == set(TrainSpec.model_fields)
    assert set(raw["neighbours"]) == set(NeighboursSpec.model_fields)
    job = load_job(EXAMPLE)
    assert job.warm_start == {} and job.spec.train.sample_customers is None
    assert "keep_runs" in raw and job.spec.keep_runs is None


def test_the_readme_nightly_example_is_a_valid_job(tmp_path):
    import re

    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    block = re.search(r"```yaml\n(run_dir: /data/nightly.*?)```", readme, re.S)
    assert block is not None
    (tmp_path / "nightly.yaml").write_text(block.group(1))
    job = load_job(tmp_path / "nightly.yaml")
    assert job.warm_start == {"dnntsp": "previous"} and job.spec.train.sample_customers == 50000
