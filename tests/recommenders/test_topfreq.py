"""G-TopFreq and P-TopFreq: hand-computed rankings, target independence, published numbers.

Also covers the baseline registry (:mod:`basketgnn.registry`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import Instances, make_split
from basketgnn.errors import UserError
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.recommenders.base import Recommender
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.recommenders.topfreq import GTopFreq, PTopFreq
from basketgnn.registry import BASELINES, make_baseline

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "dnntsp"

# u0, u1 train; u2 test. Train instance (u1, h=1) makes only u1's baskets 0..1 visible.
SEQUENCES = [
    [[0, 1], [1, 2], [1]],
    [[2], [2, 3], [4]],
    [[5], [0, 5], [4], [1]],
]
TRAIN = Instances(np.array([0, 1]), np.array([2, 1]))
TEST = Instances(np.array([2]), np.array([3]))
# Training basket counts: item 0: 1, 1: 3, 2: 3, 3: 1, 4: 0 (u1's basket 2 is not visible), 5: 0.
GLOBAL_COUNTS = [1, 3, 3, 1, 0, 0]


def tiny(sequences: list[list[list[int]]] = SEQUENCES) -> BasketData:
    return from_sequences(sequences, n_items=6, user_part=np.array([0, 0, 2], dtype=np.int8))


def shared_json(name: str) -> Path:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"{path} not found: the published DNNTSP splits are only in ../shared")
    return path


def test_gtopfreq_counts_training_baskets_up_to_the_target():
    data = tiny()
    scores = GTopFreq().fit(data, TRAIN).score(data, Instances(np.array([2, 0]), np.array([3, 1])))
    assert scores.dtype == np.float32 and scores.shape == (2, 6)
    np.testing.assert_array_equal(scores, [GLOBAL_COUNTS, GLOBAL_COUNTS])
    # Items 1 and 2 tie at 3: the lower index comes first.
    assert top_k(scores, 6)[0].tolist() == [1, 2, 0, 3, 4, 5]


def test_ptopfreq_puts_own_items_first_by_count_then_global_popularity():
    data = tiny()
    scores = PTopFreq().fit(data, TRAIN).score(data, TEST)
    # Own counts over u2's history [5], [0, 5], [4]: 5 -> 2, 0 -> 1, 4 -> 1. Between 0 and 4
    # the more popular 0 wins; then the rest by popularity (1 and 2 tie at 3, then 3).
    assert top_k(scores, 6)[0].tolist() == [5, 0, 4, 1, 2, 3]
    np.testing.assert_array_equal(np.floor(scores[0]), [1, 0, 0, 0, 1, 2])


def test_ptopfreq_popularity_only_breaks_ties_and_keeps_equal_counts_tied():
    data = tiny()
    scores = PTopFreq().fit(data, TRAIN).score(data, Instances(np.array([1]), np.array([1])))
    # History [2]: own count 1 for item 2. Popularity levels 0 < 1 < 3 map to 0, 1/3, 2/3.
    np.testing.assert_allclose(scores[0], [1 / 3, 2 / 3, 1 + 2 / 3, 1 / 3, 0, 0], rtol=1e-6)
    assert scores[0, 0] == scores[0, 3] and scores[0, 4] == scores[0, 5]  # equal counts stay tied
    assert top_k(scores, 6)[0].tolist() == [2, 1, 0, 3, 4, 5]  # own item 2 first


@pytest.mark.parametrize("model_cls", [GTopFreq, PTopFreq])
def test_scores_do_not_depend_on_the_target_basket(model_cls):
    other_target = [seq[:-1] + [[0, 1, 2, 3]] if u == 2 else seq for u, seq in enumerate(SEQUENCES)]
    a, b = tiny(), tiny(other_target)
    np.testing.assert_array_equal(
        model_cls().fit(a, TRAIN).score(a, TEST), model_cls().fit(b, TRAIN).score(b, TEST)
    )


@pytest.mark.parametrize("model_cls", [GTopFreq, PTopFreq])
def test_score_before_fit_and_on_other_catalogue_fail_clearly(model_cls):
    data = tiny()
    with pytest.raises(RuntimeError, match="call fit"):
        model_cls().score(data, TEST)
    bigger = from_sequences(SEQUENCES, n_items=9, user_part=np.array([0, 0, 2], dtype=np.int8))
    with pytest.raises(ValueError, match="fitted on 6 items but the data has 9"):
        model_cls().fit(data, TRAIN).score(bigger, TEST)


def test_registry_builds_every_baseline_and_rejects_unknown_names():
    assert set(BASELINES) == {"g-topfreq", "p-topfreq", "tifu-knn", "up-cf"}
    for name in BASELINES:
        model = make_baseline(name)
        assert isinstance(model, Recommender) and model.name == name
    tifu = make_baseline("tifu-knn", k=7, tune=False)
    assert isinstance(tifu, TifuKnn) and tifu.params()["k"] == 7
    with pytest.raises(
        UserError, match="Unknown baseline 'top'; choose one of g-topfreq, p-topfreq, tifu-knn, up-cf"
    ):
        make_baseline("top")
    with pytest.raises(UserError, match="'g-topfreq': invalid options"):
        make_baseline("g-topfreq", k=3)


def _test_metrics(name: str, model: Recommender) -> dict[str, float]:
    data = read_dnntsp_json(shared_json(name))
    split = make_split(data, "predefined")
    test = split["test"]
    scores = model.fit(data, split["train"], split["validate"]).score(data, test)
    targets = data.targets(test.users, test.n_history)
    return ranking_metrics(
        top_k(scores, 20), targets.values, targets.offsets, data.n_items, ks=(10, 20)
    )


def _rounded(metrics: dict[str, float]) -> list[float]:
    return [round(metrics[f"{m}@{k}"], 4) for k in (10, 20) for m in ("recall", "ndcg", "phr")]


def test_gtopfreq_reproduces_the_published_top_row_on_tafeng():
    """DNNTSP paper, TaFeng, "Top": recall/NDCG/PHR @10 and @20 to 4 decimals."""
    metrics = _test_metrics("TaFeng.json", GTopFreq())
    assert _rounded(metrics) == [0.1025, 0.0974, 0.3047, 0.1227, 0.1033, 0.3682]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("DC.json", [0.4576, 0.3381, 0.5557, 0.5274, 0.3577, 0.6240]),
        ("TaFeng.json", [0.1484, 0.1359, 0.4393, 0.2094, 0.1539, 0.5449]),
    ],
)
def test_ptopfreq_reproduces_the_measured_numbers(name, expected):
    """The P-TopFreq rows of ../shared/datasets/README.md."""
    assert _rounded(_test_metrics(name, PTopFreq())) == expected
