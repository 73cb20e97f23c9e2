"""DNNTSP fused with TIFU-KNN (the default): chosen after training, kept in the checkpoint,
applied by score(), and old checkpoints without it still load."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from basketgnn.data.split import make_split
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSPConfig
from basketgnn.recommenders.dnntsp import DNNTSPRecommender
from basketgnn.scoring.fusion import FUSION_WEIGHTS, TifuScorer
from basketgnn.scoring.tifu import TifuParams
from basketgnn.train.checkpoint import save_checkpoint
from basketgnn.train.trainer import score_graphs, setup_torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_tifu_knn import random_data  # noqa: E402


def test_default_fusion_goes_through_the_checkpoint(tmp_path):
    data = random_data(9, n_users=80)
    sp = make_split(data, "temporal")
    config = DNNTSPConfig(epochs=2, embed_dim=8, batch_size=16)
    assert config.fusion == "tifu"
    rec = DNNTSPRecommender(config, out_dir=tmp_path).fit(data, sp["train"], sp["validate"])
    choice = rec.result.neighbours
    assert choice["kind"] == "tifu-fusion" and {g["weight"] for g in choice["grid"]} >= set(FUSION_WEIGHTS)
    assert choice["validation_criterion"] == max(g["validation_criterion"] for g in choice["grid"])
    fusion = rec.model.fusion
    # Force a fused state, whatever the tiny model chose, so the pool crosses the checkpoint.
    if fusion.weight == 0:
        fusion.weight, fusion.scorer = 0.5, TifuScorer.build(data, sp["train"], TifuParams(k=10))
        save_checkpoint(tmp_path / "best.pt", rec.model, config, data.item_ids,
                        {"neighbour_choice": choice})
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    assert state["fusion"]["weight"] == fusion.weight > 0
    loaded = DNNTSPRecommender.from_checkpoint(tmp_path / "best.pt")
    got = loaded.score(data, sp["test"])
    np.testing.assert_array_equal(got, rec.score(data, sp["test"]))
    # score() = the fusion applied to the model's own logits.
    graphs = build_user_graphs(data, sp["test"], with_targets=False)
    logits = score_graphs(loaded.model, graphs, setup_torch(loaded.config))
    np.testing.assert_allclose(got, fusion.apply(logits, data, sp["test"]), rtol=1e-12)
    assert loaded.params()["fusion_used"]["weight"] == fusion.weight


def test_checkpoint_without_fusion_loads_and_ranks_by_the_model(tmp_path):
    data = random_data(10, n_users=60)
    sp = make_split(data, "temporal")
    rec = DNNTSPRecommender(DNNTSPConfig(epochs=1, embed_dim=8), out_dir=tmp_path)
    rec.fit(data, sp["train"], sp["validate"])
    # A checkpoint written before fusion existed: no "fusion" key, a config without the option.
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    state.pop("fusion", None)
    state["config"] = {k: v for k, v in state["config"].items() if k != "fusion"}
    state["neighbour_choice"] = {"k": None, "weight": 0.0, "grid": []}
    torch.save(state, tmp_path / "old.pt")
    old = DNNTSPRecommender.from_checkpoint(tmp_path / "old.pt")
    assert old.model.fusion is None and old.model.neighbour_pool is None
    graphs = build_user_graphs(data, sp["test"], with_targets=False)
    logits = score_graphs(old.model, graphs, setup_torch(old.config))
    np.testing.assert_array_equal(old.score(data, sp["test"]), logits)


def test_fusion_off_and_legacy_neighbour_weight_zero_rank_by_the_model():
    data = random_data(11, n_users=60)
    sp = make_split(data, "temporal")
    for config in (DNNTSPConfig(epochs=1, embed_dim=8, fusion="off"),
                   DNNTSPConfig(epochs=1, embed_dim=8, neighbour_weight=0)):
        rec = DNNTSPRecommender(config).fit(data, sp["train"], sp["validate"])
        assert rec.result.neighbours is None and rec.model.fusion is None


def test_weight_one_ranks_as_tifu_knn_without_the_model():
    data = random_data(12, n_users=60)
    sp = make_split(data, "temporal")
    rec = DNNTSPRecommender(DNNTSPConfig(epochs=1, embed_dim=8, fusion="off")).fit(data, sp["train"], sp["validate"])
    from basketgnn.metrics import top_k
    from basketgnn.recommenders.tifu_knn import TifuKnn
    from basketgnn.scoring.fusion import ScoreFusion

    tifu = TifuKnn(k=10, m=2, tune=False).fit(data, sp["train"])
    rec.model.fusion = ScoreFusion(1.0, "sigmoid", TifuScorer.build(data, sp["train"], tifu.tifu_params))
    np.testing.assert_array_equal(top_k(rec.score(data, sp["test"]), 20), top_k(tifu.score(data, sp["test"]), 20))
