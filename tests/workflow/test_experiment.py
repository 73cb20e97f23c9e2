"""One Experiment over a list of models, its typed result records, and the one choice of a model
by its validation figure."""

from __future__ import annotations

import pytest

from basketgnn import workflow
from basketgnn.data.split import make_split
from basketgnn.errors import UserError
from basketgnn.workflow.experiment import ModelResult
from basketgnn.workflow.harness import evaluate_model
from tests.support.planted import planted_data


def test_an_experiment_fits_and_evaluates_every_model_on_the_same_customers():
    data = planted_data(n_users=80, n_items=30)
    sp = make_split(data, "temporal")
    heard = []
    entries = [workflow.ModelEntry("g-topfreq"), workflow.ModelEntry("p-topfreq", label="personal")]
    experiment = workflow.Experiment(data, sp, entries, data_label="planted", on_model=heard.append)
    results = experiment.run()
    assert [r.model for r in results] == ["g-topfreq", "personal"] == [r.model for r in heard]
    assert set(experiment.fitted) == {"g-topfreq", "personal"}
    for r in results:
        assert (r.data, r.part, r.n_users) == ("planted", "test", len(sp["test"]))
        want, _ = evaluate_model(experiment.fitted[r.model].recommender, data, sp["test"])
        assert r.metrics["recall@10"] == pytest.approx(want["recall@10"], abs=1e-6)
    assert results[1].metrics["recall@10"] > results[0].metrics["recall@10"]  # the personal signal
    with pytest.raises(UserError, match="Unknown split part 'train2'"):
        workflow.Experiment(data, sp, entries, part="train2").run()


def test_result_records_round_trip_and_carry_their_validation_figure():
    data = planted_data(n_users=80, n_items=30)
    sp = make_split(data, "temporal")
    outcome = workflow.train(workflow.ModelEntry("p-topfreq"), data, sp)
    result = workflow.evaluate(outcome, data, sp, "test", "planted", with_validation=True)
    record = result.to_json()
    assert set(record) == {"model", "params", "data", "split", "part", "n_users", "metrics", "timing_s",
                           "best_epoch", "epochs_run", "fusion", "validation"}  # fmt: skip
    assert record["best_epoch"] is None and record["fusion"] is None  # a baseline
    assert 0 < record["validation"]["criterion"] < 1
    assert ModelResult.from_json(record).to_json() == record
    plain = workflow.evaluate(outcome, data, sp, "test").to_json()
    assert "validation" not in plain


def test_select_by_validation_takes_the_best_criterion_and_the_first_of_equals():
    records = [{"model": m, "validation": {"criterion": c}} for m, c in (("a", 0.3), ("b", 0.5), ("c", 0.5))]
    best, why = workflow.select_by_validation(records)
    assert best == "b" and why["validation_criterion"] == {"a": 0.3, "b": 0.5, "c": 0.5}
    assert why["reason"].startswith("b, best validation mean of recall, NDCG and PHR at 10 and 20: 0.5000")
