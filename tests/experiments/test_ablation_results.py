"""The ablation's results.jsonl (basketgnn/experiments/ablation_results.py): a partial last line
is ignored and its run redone, a corrupt line in the middle is an error, and lines without the
data hash are not current."""

from __future__ import annotations

import json

import pytest

from basketgnn.errors import UserError
from basketgnn.experiments.ablation import run_grid
from basketgnn.experiments.ablation_results import read_results
from basketgnn.experiments.ablation_spec import dataset_hash
from tests.support.ablation import lines, write_spec


def test_truncated_last_line_is_ignored_and_its_run_redone(tmp_path, dataset, fit_counter):
    spec = write_spec(tmp_path, dataset, seeds=[0], variants={"full": {}}, baselines=[])
    run_grid(spec)
    results = tmp_path / "out" / "results.jsonl"
    complete = results.read_text()
    # A crash mid-write leaves part of a second line without its newline.
    results.write_text(complete + complete[: len(complete) // 2])
    assert read_results(results) == [json.loads(complete)]

    write_spec(tmp_path, dataset, seeds=[0, 1], variants={"full": {}}, baselines=[])
    run_grid(spec)
    rows = lines(results)  # every line parses: the partial one was cut off, not glued to
    assert [r["seed"] for r in rows] == [0, 1] and fit_counter == [0, 1]


def test_corrupt_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"dataset": "a"\n{}\n')
    with pytest.raises(UserError, match="line 1 is not a result record"):
        read_results(path)


def test_results_written_before_data_hash_are_redone(tmp_path, dataset):
    spec = write_spec(tmp_path, dataset, variants={}, baselines=["g-topfreq"])
    run_grid(spec)
    results = tmp_path / "out" / "results.jsonl"
    (old,) = lines(results)
    del old["data_hash"]
    results.write_text(json.dumps(old) + "\n")
    events = []
    run_grid(spec, progress=events.append)
    assert [e.status for e in events] == ["start", "done"]
    assert lines(results)[1]["data_hash"] == dataset_hash(dataset)
