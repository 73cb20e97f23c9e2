"""fit_and_evaluate: fits on the split's training part, evaluates the part asked for."""

from __future__ import annotations

from typing import Any

import pytest

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import prepare_log
from basketgnn.data.split import Instances, Split, make_split
from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from basketgnn.recommenders.topfreq import PTopFreq
from basketgnn.workflow.harness import evaluate_model, fit_and_evaluate


class RecordingPTopFreq(PTopFreq):
    """P-TopFreq that remembers what each fit() received."""

    def __init__(self) -> None:
        super().__init__()
        self.fits: list[tuple[Instances, Instances | None]] = []

    def fit(self, data: BasketData, train: Instances, validate: Instances | None = None) -> Any:
        self.fits.append((train, validate))
        return super().fit(data, train, validate)


@pytest.fixture(scope="module")
def data_and_split(tmp_path_factory) -> tuple[BasketData, Split]:
    path = tmp_path_factory.mktemp("log") / "log.csv"
    write_log(generate_log(n_customers=80, n_items=50, mean_baskets=5, seed=1), path)
    data = prepare_log(path)
    return data, make_split(data, "random", seed=0)


@pytest.mark.parametrize("part", ["test", "validate"])
def test_fits_on_the_training_part_then_gives_the_harness_metrics_of_the_part(
    data_and_split, part
):
    data, split = data_and_split
    model = RecordingPTopFreq()
    metrics, timing = fit_and_evaluate(model, data, split, part)
    assert model.fits == [(split["train"], split["validate"])]
    reference, _ = evaluate_model(PTopFreq().fit(data, split["train"]), data, split[part])
    assert metrics == pytest.approx(reference, nan_ok=True)
    assert set(timing) == {"fit", "score"} and all(s >= 0 for s in timing.values())


def test_the_default_part_is_test_and_ks_are_passed_on(data_and_split):
    data, split = data_and_split
    metrics, _ = fit_and_evaluate(PTopFreq(), data, split, ks=(5,))
    reference, _ = evaluate_model(PTopFreq().fit(data, split["train"]), data, split["test"], (5,))
    assert set(metrics) == set(reference) and {"recall@5", "ndcg@5"} <= set(metrics)
    assert metrics == pytest.approx(reference, nan_ok=True)


def test_a_trained_model_is_only_evaluated_with_fit_false(data_and_split):
    data, split = data_and_split
    model = RecordingPTopFreq()
    model.fit(data, split["train"])
    metrics, timing = fit_and_evaluate(model, data, split, fit=False)
    assert len(model.fits) == 1  # the fit above, none by fit_and_evaluate
    assert metrics == pytest.approx(evaluate_model(model, data, split["test"])[0], nan_ok=True)
    assert timing["fit"] < 0.01


def test_an_unknown_part_is_a_user_error_before_any_fitting(data_and_split):
    data, split = data_and_split
    model = RecordingPTopFreq()
    with pytest.raises(UserError, match="Unknown split part 'tset'"):
        fit_and_evaluate(model, data, split, "tset")
    assert model.fits == []
