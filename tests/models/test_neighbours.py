"""Neighbour scores: a loop reference, self-exclusion, fusion, and the checkpoint round trip."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances, make_split
from basketgnn.engine.addons import NEIGHBOUR_KS, NEIGHBOUR_WEIGHTS
from basketgnn.engine.recommender import NeuralRecommender
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.models.neighbours import NeighbourPool, NeighbourScores, fuse_neighbours

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommenders"))
from test_tifu_knn import random_data, reference_scores  # noqa: E402


def dense(s: NeighbourScores, n_items: int) -> np.ndarray:
    out = np.zeros((len(s), n_items))
    rows = np.repeat(np.arange(len(s)), np.diff(s.offsets))
    out[rows, s.items] = s.values
    return out


def reference_neighbour_scores(data, train, query, k, m, r_b, r_g, top) -> np.ndarray:
    """TIFU's neighbour mean (alpha = 0) by loops, cut to the top entries, divided by the max."""
    mean, gap = reference_scores(data, train, query, k, m, r_b, r_g, alpha=0.0)
    assert gap > 1e-9, "near-tied neighbours would make the comparison ambiguous"
    out = np.zeros_like(mean)
    for r, row in enumerate(mean):
        keep = np.argsort(-row, kind="stable")[:top]
        keep = keep[row[keep] > 0]
        if len(keep):
            out[r, keep] = row[keep] / row.max()
    return out


@pytest.mark.parametrize("seed, k, m, r_b, r_g, top", [(0, 5, 2, 0.9, 0.7, 30), (1, 3, 3, 1.0, 0.6, 4)])
def test_scores_match_the_loop_reference(seed, k, m, r_b, r_g, top):
    data = random_data(seed)
    n = data.n_baskets_per_user
    train = Instances(np.arange(30), n[:30] - 1)
    # Users 0..4 are training customers too and must not be their own neighbours.
    query = Instances(np.r_[np.arange(30, 40), np.arange(5)], np.r_[n[30:40] - 1, n[:5] - 2])
    pool = NeighbourPool.build(data, train, k=k, m=m, r_b=r_b, r_g=r_g, top=top)
    got = pool.scores(data, query)
    expected = reference_neighbour_scores(data, train, query, k, m, r_b, r_g, top)
    assert got.values.dtype == np.float32 and np.all(np.diff(got.offsets) <= top)
    assert np.all((got.values > 0) & (got.values <= 1.0 + 1e-6))
    mean, _ = reference_scores(data, train, query, k, m, r_b, r_g, alpha=0.0)
    norm = mean / mean.max(axis=1, keepdims=True)
    got_dense = dense(got, data.n_items)
    # Where values tie at the cut, float32 rounding may keep another of the tied items; those
    # rows must still keep `top` entries that are all at least every dropped one.
    cut = -np.sort(-norm, axis=1)[:, top - 1 : top]
    tied = (np.abs(norm - cut) < 1e-6).sum(axis=1) > 1
    assert tied.sum() < len(tied), "every row tied: the check below would test nothing"
    np.testing.assert_allclose(got_dense[~tied], expected[~tied], rtol=1e-5, atol=1e-6)
    for r in np.flatnonzero(tied):
        kept = got_dense[r] > 0
        assert kept.sum() == min(top, (norm[r] > 0).sum())
        np.testing.assert_allclose(got_dense[r, kept], norm[r, kept], rtol=1e-5)
        assert norm[r, kept].min() >= norm[r, ~kept].max() - 1e-6


def test_own_row_is_skipped_but_an_unknown_customer_may_match_anyone():
    # u0's pool row equals its query vector; u0 must get u1's items, a stranger u0's.
    data = from_sequences([[[0], [0], [0]], [[1], [2]]], n_items=3)
    train = Instances(np.array([0, 1]), np.array([1, 1]))
    pool = NeighbourPool.build(data, train, k=1, m=1, r_b=1.0, r_g=1.0)
    query = Instances(np.array([0]), np.array([2]))
    np.testing.assert_allclose(dense(pool.scores(data, query), 3), [[0, 1, 1]])
    stranger = from_sequences([[[0], [0]]], n_items=3)
    stranger = type(stranger)(**{**stranger.__dict__, "user_ids": np.array(["<history>"])})
    np.testing.assert_allclose(dense(pool.scores(stranger, Instances(np.array([0]), np.array([2]))), 3), [[1, 0, 0]])


def test_fusion_adds_to_the_probability():
    logits = np.array([[0.0, 2.0, -1.0], [30.0, -30.0, 0.5]], dtype=np.float32)
    s = NeighbourScores(np.array([0, 1, 3]), np.array([2, 0, 1]), np.array([1.0, 0.5, 1.0], np.float32))
    got = fuse_neighbours(logits, s, 0.3)
    sig = 1 / (1 + np.exp(-logits.astype(np.float64)))
    expected = sig + 0.3 * np.array([[0, 0, 1.0], [0.5, 1.0, 0]])
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-7)
    # Confident items keep their order (float32 would tie both at 1.0).
    none = NeighbourScores(np.array([0, 0]), np.zeros(0, np.int64), np.zeros(0, np.float32))
    confident = fuse_neighbours(np.array([[20.0, 30.0]], dtype=np.float32), none, 0.3)
    assert confident[0, 1] > confident[0, 0]
    with pytest.raises(ValueError, match="2 instances"):
        fuse_neighbours(logits[:1], s, 0.3)


def test_pool_survives_the_checkpoint(tmp_path):
    data = random_data(4, n_users=60)
    sp = make_split(data, "temporal")
    config = DNNTSPConfig(epochs=2, embed_dim=8, batch_size=16, neighbour_weight=0.5, neighbour_k=5)
    rec = NeuralRecommender(SPEC, config, out_dir=tmp_path).fit(data, sp["train"], sp["validate"])
    assert rec.addon.pool.k == 5 and rec.addon.weight == 0.5
    assert rec.params()["neighbour_weight_used"] == 0.5
    loaded = NeuralRecommender.from_checkpoint(tmp_path / "best.pt")
    np.testing.assert_array_equal(loaded.score(data, sp["test"]), rec.score(data, sp["test"]))
    # Scoring is sigmoid(model score) + w * n, which is not the model's own score.
    fused = rec.score(data, sp["test"])
    pool = rec.addon.pool
    rec.addon = None
    logits = rec.score(data, sp["test"])
    expected = fuse_neighbours(logits, pool.scores(data, sp["test"]), 0.5)
    np.testing.assert_allclose(fused, expected, rtol=1e-6)
    assert not np.allclose(fused, 1 / (1 + np.exp(-logits)))


def test_auto_choice_is_the_best_validation_grid_point():
    data = random_data(5, n_users=80)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=2, embed_dim=8, batch_size=16, fusion="neighbours"))
    rec.fit(data, sp["train"], sp["validate"])
    choice = rec.result.addon
    assert len(choice.grid) == len(NEIGHBOUR_WEIGHTS) * len(NEIGHBOUR_KS)
    best = max(g["validation_criterion"] for g in choice.grid)
    winner = [g for g in choice.grid if g["weight"] == choice.weight and (choice.k is None or g["k"] == choice.k)]
    assert winner[0]["validation_criterion"] == best
    assert (rec.addon is not None) == (choice.weight > 0)


def test_switched_off_means_no_pool_and_plain_scores():
    data = random_data(6, n_users=60)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=1, embed_dim=8, neighbour_weight=0))
    rec.fit(data, sp["train"], sp["validate"])
    assert rec.result.addon is None and rec.addon is None
    assert rec.params()["neighbour_weight_used"] == 0.0


def test_no_target_basket_and_no_own_row_reaches_the_neighbour_scores():
    # Temporal split: train target = basket 1, validate target = basket 2, test target = basket 3.
    # Customer 0 alone buys item 9 (basket 0, in its own pool row), item 7 (its validation
    # target) and item 8 (its test target).
    seqs = [[[0, 9], [1, 2], [7, 1], [8]]] + [[[0, 1], [1, 2], [1, 3], [2]] for _ in range(5)]
    data = from_sequences(seqs, n_items=10)
    sp = make_split(data, "temporal")
    assert sp["train"].n_history.tolist() == [1] * 6 and sp["test"].n_history.tolist() == [3] * 6
    # k = 5: everybody else is a neighbour.
    pool = NeighbourPool.build(data, sp["train"], k=5, m=1, r_b=1.0, r_g=1.0)
    for part in ("validate", "test"):
        got = dense(pool.scores(data, sp[part]), 10)
        assert not got[:, [7, 8]].any(), part  # targets are in no pool row
        assert got[0, 9] == 0, part  # customer 0 is not its own neighbour ...
        assert (got[1:, 9] > 0).all(), part  # ... but the others' neighbour


def test_weight_zero_checkpoint_has_no_pool(tmp_path):
    data = random_data(7, n_users=60)
    sp = make_split(data, "temporal")
    config = DNNTSPConfig(epochs=1, embed_dim=8, neighbour_weight=0)
    NeuralRecommender(SPEC, config, out_dir=tmp_path).fit(data, sp["train"], sp["validate"])
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    assert state["addon"] is None and "addon_choice" not in state["extras"]
    loaded = NeuralRecommender.from_checkpoint(tmp_path / "best.pt")
    assert loaded.addon is None


def test_rows_slice_and_chunked_choice_agree(monkeypatch):
    s = NeighbourScores(np.array([0, 2, 2, 5]), np.array([1, 4, 0, 2, 3]), np.arange(1, 6, dtype=np.float32))
    part = s.rows(1, 3)
    np.testing.assert_array_equal(part.offsets, [0, 0, 3])
    np.testing.assert_array_equal(part.items, [0, 2, 3])
    # The validation grid is the same whether fused in one chunk or in chunks of 7 rows.
    import basketgnn.engine.addons as addons

    data = random_data(8, n_users=60)
    sp = make_split(data, "temporal")
    for fusion in ("neighbours", "tifu"):
        config = DNNTSPConfig(epochs=1, embed_dim=8, fusion=fusion)
        monkeypatch.setattr(addons, "_FUSE_CHUNK", 2048)
        whole = NeuralRecommender(SPEC, config).fit(data, sp["train"], sp["validate"])
        monkeypatch.setattr(addons, "_FUSE_CHUNK", 7)
        chunked = NeuralRecommender(SPEC, config).fit(data, sp["train"], sp["validate"])
        assert whole.result.addon.grid == chunked.result.addon.grid, fusion
    assert len(sp["validate"]) > 7


def test_one_search_for_several_k_equals_one_search_each():
    data = random_data(0)
    n = data.n_baskets_per_user
    train = Instances(np.arange(30), n[:30] - 1)
    query = Instances(np.arange(30, 40), n[30:40] - 1)
    for k in (3, 5):  # distinct k-th distances, so the nearest prefix is unambiguous
        assert reference_scores(data, train, query, k, 3, 1.0, 0.7, 0.0)[1] > 1e-9
    pool = NeighbourPool.build(data, train, k=5, top=30)
    by_k = pool.scores_by_k(data, query, (3, 5))
    for k in (3, 5):
        alone = pool.with_k(k).scores(data, query)
        np.testing.assert_array_equal(by_k[k].offsets, alone.offsets)
        np.testing.assert_array_equal(by_k[k].items, alone.items)
        np.testing.assert_allclose(by_k[k].values, alone.values, rtol=1e-6)
    assert not np.array_equal(dense(by_k[3], data.n_items), dense(by_k[5], data.n_items))
    assert pool.k == 5 and pool.with_k(3).k == 3
