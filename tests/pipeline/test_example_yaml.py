"""pipelines/example.yaml documents every input key of a job, and loads as a valid job."""

from __future__ import annotations

from pathlib import Path

import yaml

from basketgnn.pipeline.run import ColumnsSpec, InputSpec, load_job

EXAMPLE = Path(__file__).resolve().parents[2] / "pipelines" / "example.yaml"


def test_example_sets_every_input_and_column_key():
    raw = yaml.safe_load(EXAMPLE.read_text())
    assert set(raw["input"]) == set(InputSpec.model_fields)
    assert set(raw["input"]["columns"]) == set(ColumnsSpec.model_fields)
    job = load_job(EXAMPLE)
    assert job.spec.input.where is None and job.spec.input.max_basket_items is None
