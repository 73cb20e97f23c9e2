"""Fixtures of the ablation tests: a small prepared dataset (made once, only read) and a counter
of the neural trainings a grid runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from basketgnn.data.ingest import prepare_log
from basketgnn.data.synth import generate_log, write_log
from basketgnn.recommenders.neural import NeuralRecommender


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    """A prepared dataset folder (``ds``) beside the log it was prepared from (``log.csv``)."""
    folder = tmp_path_factory.mktemp("data")
    # 40 items: training validates NDCG@40 and evaluation reports @40, so fewer items fail.
    write_log(generate_log(n_customers=120, n_items=40, mean_baskets=6, seed=0), folder / "log.csv")
    prepare_log(folder / "log.csv").save(folder / "ds")
    return folder / "ds"


@pytest.fixture
def fit_counter(monkeypatch) -> list[int]:
    """Counts DNNTSP trainings (seed of each), still training for real."""
    seeds: list[int] = []
    real_fit = NeuralRecommender.fit

    def counting_fit(self, *args, **kwargs):
        seeds.append(self.config.seed)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(NeuralRecommender, "fit", counting_fit)
    return seeds
