"""rank_items (basketgnn/recommenders/base.py), the top k of any recommender: one with its own
``rank`` is ranked by it, any other by the top k of ``score`` (best first, ties to the lower
item index: a stable argsort is the reference), chunk by chunk, with the same result for every
chunk size."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.recommenders.base import (
    DENSE_CHUNK_BYTES,
    MIN_CHUNK,
    Recommender,
    default_chunk,
    rank_items,
)

N_ITEMS = 7
DATA = from_sequences([[[0], [1, 2]], [[3], [4], [5]], [[6], [0], [1], [2]]] * 4, n_items=N_ITEMS)
INSTANCES = Instances(np.array([0, 1, 2, 3, 5, 7, 8, 10, 11]), np.array([1, 2, 3, 1, 1, 2, 3, 1, 1]))


class Scoring:
    """Scores from the instance only, rounded to tenths so that ties happen."""

    name = "scoring"

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []

    def fit(self, data, train, validate=None):
        return self

    def score(self, data, instances):
        self.chunks.append(instances.users.tolist())
        rng = [np.random.default_rng(int(u) * 10 + int(h)) for u, h in zip(instances.users, instances.n_history)]
        return np.stack([np.round(r.random(data.n_items), 1) for r in rng]).astype(np.float32)

    def params(self):
        return {}


class Ranking(Scoring):
    """Ranks by its own rule (item u mod I first, then the next ones), never by score."""

    name = "ranking"

    def score(self, data, instances):
        raise AssertionError("a recommender with rank() is not scored")

    def rank(self, data, instances, k):
        self.chunks.append(instances.users.tolist())
        items = (instances.users[:, None] + np.arange(k)[None, :]) % data.n_items
        return items.astype(np.int64), -np.arange(k, dtype=np.float32)[None, :].repeat(len(instances), 0)


def reference(model: Scoring, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = Scoring.score(model, DATA, INSTANCES)
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(scores, idx, axis=1)


def test_both_fakes_are_recommenders():
    assert isinstance(Scoring(), Recommender) and isinstance(Ranking(), Recommender)


@pytest.mark.parametrize("chunk", [1, 2, 4, 9, 2048])
def test_without_rank_it_is_the_top_k_of_score_in_chunks(chunk):
    model = Scoring()
    items, scores = rank_items(model, DATA, INSTANCES, 4, chunk=chunk)
    want_items, want_scores = reference(Scoring(), 4)
    np.testing.assert_array_equal(items, want_items)
    np.testing.assert_array_equal(scores, want_scores)
    assert items.dtype == np.int64 and scores.dtype == np.float32
    assert [len(c) for c in model.chunks][:-1] == [chunk] * (len(model.chunks) - 1)
    assert sum(model.chunks, []) == INSTANCES.users.tolist()  # every instance once, in order


@pytest.mark.parametrize("chunk", [1, 4, 2048])
def test_with_rank_it_is_ranked_by_rank_in_chunks(chunk):
    model = Ranking()
    items, scores = rank_items(model, DATA, INSTANCES, 3, chunk=chunk)
    np.testing.assert_array_equal(items, (INSTANCES.users[:, None] + np.arange(3)) % N_ITEMS)
    np.testing.assert_array_equal(scores, np.tile([0.0, -1.0, -2.0], (len(INSTANCES), 1)))
    assert sum(model.chunks, []) == INSTANCES.users.tolist()
    assert max(len(c) for c in model.chunks) == min(chunk, len(INSTANCES))


def test_the_default_chunk_holds_the_dense_budget_and_at_least_the_minimum():
    assert default_chunk(3600) * 4 * 3600 <= DENSE_CHUNK_BYTES < (default_chunk(3600) + 1) * 4 * 3600
    assert default_chunk(3600) > MIN_CHUNK  # a small catalogue: fewer, larger calls
    assert default_chunk(10**6) == MIN_CHUNK  # a large one: never below the minimum
    model = Ranking()
    rank_items(model, DATA, INSTANCES, 3)  # the default: every instance of this set in one call
    assert model.chunks == [INSTANCES.users.tolist()]


def test_a_chunk_below_one_is_refused():
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        rank_items(Scoring(), DATA, INSTANCES, 3, chunk=0)


def test_k_beyond_the_catalogue_is_the_whole_catalogue():
    items, scores = rank_items(Scoring(), DATA, INSTANCES, 50, chunk=5)
    assert items.shape == scores.shape == (len(INSTANCES), N_ITEMS)
    assert all(sorted(row) == list(range(N_ITEMS)) for row in items.tolist())
    np.testing.assert_array_equal(items, reference(Scoring(), N_ITEMS)[0])
