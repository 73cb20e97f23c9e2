"""A trained neural model as a recommender: rank is the top k of score's matrix, from shared scores
where the spec declares them (on one thread or several) and densely otherwise."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from basketgnn import registry
from basketgnn.data.split import Instances, make_split
from basketgnn.metrics import top_k
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig
from basketgnn.recommenders import shared_scoring
from basketgnn.recommenders.neural import NeuralRecommender
from tests.support.planted import planted_data


def untrained(spec, config, n_items, item_ids):
    torch.manual_seed(0)
    rec = NeuralRecommender(spec, config)
    rec.model = spec.build(n_items, config).eval()
    rec.item_ids = item_ids
    return rec


@pytest.mark.parametrize("user_context, threads", [(False, 1), (False, 2), (True, 1)])
def test_rank_is_the_top_k_of_score(monkeypatch, user_context, threads):
    monkeypatch.setattr(shared_scoring, "RANK_PART_ROWS", 16)  # two threads rank in two parts
    data = planted_data(n_users=90, n_items=40)
    rec = untrained(SPEC, DNNTSPConfig(embed_dim=8, threads=threads, user_context=user_context), 40, data.item_ids)
    with torch.no_grad():
        rec.model.scorer.out.weight.normal_(0, 3.0)  # spread-out scores
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    scores = rec.score(data, everyone)
    items, values = rec.rank(data, everyone, 7)
    want = top_k(scores, 7)
    np.testing.assert_array_equal(items, want)
    np.testing.assert_array_equal(values, np.take_along_axis(scores, want, 1).astype(np.float32))
    shared = rec.shared_scores(data, everyone)
    assert rec.has_shared_scores and (shared is None) == user_context
    if shared is not None:  # the shared form holds the dense matrix exactly
        dense = np.repeat(shared.base[None, :], data.n_users, axis=0)
        rows = np.repeat(np.arange(data.n_users), np.diff(shared.offsets))
        dense[rows, shared.items] = shared.values
        np.testing.assert_array_equal(dense, scores)


def test_a_model_without_shared_scores_ranks_its_dense_matrix():
    data = planted_data(n_users=60, n_items=30)
    spec = registry.get_spec("sasrec")
    rec = untrained(spec, spec.config_cls(dim=8, heads=1, ffn_dim=8, threads=1), 30, data.item_ids)
    assert not rec.has_shared_scores and rec.shared_scores(data, make_split(data, "temporal")["test"]) is None
    test = make_split(data, "temporal")["test"]
    items, _ = rec.rank(data, test, 5)
    np.testing.assert_array_equal(items, top_k(rec.score(data, test), 5))


def test_validation_scores_are_the_scores_and_threads_are_a_scoring_setting():
    data = planted_data(n_users=60, n_items=30)
    rec = untrained(SPEC, DNNTSPConfig(embed_dim=8, threads=1, batch_work=50), 30, data.item_ids)
    val = make_split(data, "temporal")["validate"]
    np.testing.assert_allclose(rec.validation_scores(data, val), rec.score(data, val), rtol=1e-6, atol=1e-6)
    assert rec.with_threads(None).threads == 1 and rec.with_threads(3).threads == 3


def test_scoring_before_training_and_a_catalogue_mismatch_are_errors():
    data = planted_data(n_users=30, n_items=20)
    rec = NeuralRecommender(SPEC, DNNTSPConfig(embed_dim=8))
    with pytest.raises(RuntimeError, match="before fit"):
        rec.score(data, make_split(data, "temporal")["test"])
    rec = untrained(SPEC, DNNTSPConfig(embed_dim=8), 25, np.arange(25).astype(str))
    with pytest.raises(ValueError, match="data has 20 items but the model 25"):
        rec.rank(data, make_split(data, "temporal")["test"], 5)
    assert DNNTSP is type(rec.model)


def test_training_validates_from_the_shared_scores_with_the_dense_rankings_metrics(monkeypatch):
    """fit hands the engine the shared-form ranking on the scoring threads (here for a
    validation of any length); the engine alone ranks the dense scores: the same epochs,
    losses and validation metrics."""
    from basketgnn.engine.trainer import train_model
    from basketgnn.recommenders import shared_scoring

    monkeypatch.setattr(shared_scoring, "PARALLEL_VALIDATION_S", 0.0)
    data = planted_data(n_users=80)
    sp = make_split(data, "temporal")
    config = DNNTSPConfig(lr=1e-2, batch_size=32, embed_dim=16, epochs=3, threads=2)
    calls = []

    def counted(module, batch):
        calls.append(1)
        return SPEC.score_sparse(module, batch)

    rec = NeuralRecommender(dataclasses.replace(SPEC, score_sparse=counted), config)
    rec.fit(data, sp["train"], sp["validate"])
    assert calls  # the later validations ranked from the shared form
    _, dense = train_model(SPEC, data, sp["train"], sp["validate"], config, progress=False)

    def logged(history):
        return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in history]

    assert logged(rec.result.history) == logged(dense.history)
    assert len(dense.history) == 3 and dense.history[-1]["val_recall@10"] > 0
