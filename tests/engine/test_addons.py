"""The ranking add-on step with the TIFU-KNN fusion (the default, ``fusion: tifu``): chosen
after training for any model of the engine, kept in the checkpoint, applied by score() (the
module not run when TIFU-KNN alone won), and checkpoints written before it still load and rank
as they did."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from test_trainer import planted_data
from torch import nn

from basketgnn.data.split import make_split
from basketgnn.engine.addons import AddOnChoice, FusionAddOn, NeighbourAddOn, addon_from_state
from basketgnn.engine.checkpoint import save_checkpoint
from basketgnn.engine.options import TrainOptions
from basketgnn.engine.recommender import NeuralRecommender
from basketgnn.engine.spec import ModelSpec
from basketgnn.engine.trainer import score_source, setup_torch
from basketgnn.metrics import top_k
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.models.neighbours import NeighbourPool
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.scoring.fusion import FUSION_WEIGHTS, ScoreFusion, TifuScorer
from basketgnn.scoring.tifu import TifuParams


# A model that is not DNNTSP: a linear layer over each customer's item counts.
@dataclass
class _CountBatch:
    counts: torch.Tensor  # [B, I]
    target_items: torch.Tensor | None = None
    target_offsets: torch.Tensor | None = None

    def to(self, device):
        return _CountBatch(self.counts.to(device),
                           None if self.target_items is None else self.target_items.to(device),
                           None if self.target_offsets is None else self.target_offsets.to(device))


class _Counts:
    def __init__(self, data, instances):
        self.data, self.instances = data, instances
        self.lengths = np.asarray(instances.n_history)

    def __len__(self):
        return len(self.instances)

    def collate(self, idx, with_targets=True):
        users, n_hist = self.instances.users[idx], self.instances.n_history[idx]
        items = self.data.histories(users, n_hist).items_per_instance()
        owner = np.repeat(np.arange(len(idx)), np.diff(items.offsets))
        counts = np.zeros((len(idx), self.data.n_items), np.float32)
        np.add.at(counts, (owner, items.values), 1.0)
        batch = _CountBatch(torch.from_numpy(counts))
        if with_targets:
            t = self.data.targets(users, n_hist)
            batch.target_items = torch.from_numpy(t.values.astype(np.int64))
            batch.target_offsets = torch.from_numpy(t.offsets.astype(np.int64))
        return batch


class _Linear(nn.Module):
    def __init__(self, n_items):
        super().__init__()
        self.layer = nn.Linear(n_items, n_items)

    def forward(self, batch):
        return self.layer(batch.counts)


class _CountsConfig(TrainOptions):
    pass


COUNTS = ModelSpec("counts", "test model", _CountsConfig, lambda n, c: _Linear(n),
                   lambda data, inst, c, t: _Counts(data, inst))


def _logits(rec, data, instances):
    source = rec.spec.batches(data, instances, rec.config, False)
    return score_source(rec.model, source, data.n_items, setup_torch(rec.config))


def _force_fusion(rec, data, train, weight):
    fusion = ScoreFusion(weight, "sigmoid", TifuScorer.build(data, train, TifuParams(k=10)))
    rec.addon = FusionAddOn(fusion)
    return fusion


def test_any_model_gets_the_default_fusion_through_the_checkpoint(tmp_path):
    data = planted_data(n_users=80)
    sp = make_split(data, "temporal")
    config = _CountsConfig(epochs=2, batch_size=16)
    assert config.fusion == "tifu" and DNNTSPConfig().fusion == "tifu"
    rec = NeuralRecommender(COUNTS, config, out_dir=tmp_path).fit(data, sp["train"], sp["validate"])
    choice = rec.result.addon
    assert choice.kind == "tifu-fusion" and {g["weight"] for g in choice.grid} >= set(FUSION_WEIGHTS)
    assert choice.details["validation_criterion"] == max(g["validation_criterion"] for g in choice.grid)
    assert choice.describe().startswith("fusion with TIFU-KNN: ")
    assert (rec.addon is not None) == (choice.weight > 0)
    assert rec.params()["fusion_used"]["weight"] == choice.weight
    # Force a fused add-on, whatever the tiny model chose, so the pool crosses the checkpoint.
    fusion = _force_fusion(rec, data, sp["train"], 0.5)
    save_checkpoint(tmp_path / "best.pt", "counts", rec.model, config, data.item_ids,
                    {"addon_choice": choice.as_dict()}, addon=rec.addon)
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    assert state["addon"]["kind"] == "tifu-fusion/1" and state["addon"]["weight"] == 0.5
    loaded = addon_from_state(state["addon"])
    assert isinstance(loaded, FusionAddOn) and loaded.weight == 0.5
    got = rec.score(data, sp["test"])
    # score() = the fusion applied to the model's own logits; the reload ranks the same.
    np.testing.assert_allclose(got, fusion.apply(_logits(rec, data, sp["test"]), data, sp["test"]), rtol=1e-12)
    rec.addon = loaded
    np.testing.assert_array_equal(rec.score(data, sp["test"]), got)
    assert AddOnChoice.from_dict(choice.as_dict()) == choice


def test_dnntsp_fusion_survives_its_checkpoint_file(tmp_path, monkeypatch):
    import basketgnn.engine.trainer as trainer
    from basketgnn.engine import addons

    data = planted_data(n_users=80)
    sp = make_split(data, "temporal")
    real = addons.choose_fusion

    def fused(*args, **kw):  # the tiny model may choose λ = 0; make the file hold a pool
        f = real(*args, **kw)
        return ScoreFusion(0.3, f.transform, TifuScorer.build(data, sp["train"], f.tuned_tifu), f.grid,
                           f.tifu_validation, f.tuned_tifu, f.selection)

    monkeypatch.setattr(addons, "choose_fusion", fused)
    assert trainer.choose_addon is addons.choose_addon
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=1, embed_dim=8), out_dir=tmp_path)
    rec.fit(data, sp["train"], sp["validate"])
    assert isinstance(rec.addon, FusionAddOn) and rec.addon.weight == 0.3
    loaded = NeuralRecommender.from_checkpoint(tmp_path / "best.pt")
    assert isinstance(loaded.addon, FusionAddOn) and loaded.checkpoint["addon_choice"]["kind"] == "tifu-fusion"
    np.testing.assert_array_equal(loaded.score(data, sp["test"]), rec.score(data, sp["test"]))
    assert loaded.params()["fusion_used"]["weight"] == 0.3


def test_weight_one_ranks_as_tifu_knn_without_the_model():
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(COUNTS, _CountsConfig(epochs=1, fusion="off")).fit(data, sp["train"], sp["validate"])
    assert rec.result.addon is None and rec.addon is None
    tifu = TifuKnn(k=10, m=2, tune=False).fit(data, sp["train"])
    rec.addon = FusionAddOn(ScoreFusion(1.0, "sigmoid", TifuScorer.build(data, sp["train"], tifu.tifu_params)))
    assert not rec.addon.needs_model
    rec.model = nn.Identity()  # would fail on a batch: the module must not be run
    np.testing.assert_array_equal(top_k(rec.score(data, sp["test"]), 20), top_k(tifu.score(data, sp["test"]), 20))


def test_fusion_off_and_legacy_neighbour_weight_zero_rank_by_the_model():
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    for config in (DNNTSPConfig(epochs=1, embed_dim=8, fusion="off"),
                   DNNTSPConfig(epochs=1, embed_dim=8, neighbour_weight=0)):
        assert config.fusion == "off"
        rec = NeuralRecommender(SPEC, config).fit(data, sp["train"], sp["validate"])
        assert rec.result.addon is None and rec.addon is None
        np.testing.assert_array_equal(rec.score(data, sp["test"]), _logits(rec, data, sp["test"]))


def test_an_engine_checkpoint_from_before_the_fusion_keeps_its_neighbour_addon(tmp_path):
    """Format 2 as the engine wrote it before `fusion`: a config without the option (its
    neighbour options at their defaults) and the neighbour add-on's state."""
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=1, embed_dim=8, fusion="off"), out_dir=tmp_path)
    rec.fit(data, sp["train"], sp["validate"])
    pool = NeighbourPool.build(data, sp["train"], k=5)
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    state["config"] = {k: v for k, v in state["config"].items() if k != "fusion"}
    state["addon"] = {**pool.state(), "weight": 0.3}  # no kind: the engine's first add-on
    state["extras"]["addon_choice"] = {"kind": "neighbours", "k": 5, "weight": 0.3, "grid": []}
    torch.save(state, tmp_path / "old.pt")
    old = NeuralRecommender.from_checkpoint(tmp_path / "old.pt")
    assert old.config.fusion == "neighbours" and old.config.neighbour_weight == "auto"
    assert isinstance(old.addon, NeighbourAddOn) and old.addon.pool.k == 5
    rec.addon = NeighbourAddOn(pool, 0.3)
    np.testing.assert_array_equal(old.score(data, sp["test"]), rec.score(data, sp["test"]))
    assert old.params()["neighbour_weight_used"] == 0.3 and "fusion_used" not in old.params()


def test_a_format_1_checkpoint_of_the_fusion_branch_loads_its_fusion(tmp_path):
    """basketgnn-dnntsp-checkpoint/1 as branch `fusion` wrote it before the engine: the fusion
    state at the top level as "fusion", its choice as "neighbour_choice"."""
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=1, embed_dim=8, fusion="off"), out_dir=tmp_path)
    rec.fit(data, sp["train"], sp["validate"])
    fusion = _force_fusion(rec, data, sp["train"], 0.4)
    new = torch.load(tmp_path / "best.pt", weights_only=False)
    old = {"format": "basketgnn-dnntsp-checkpoint/1", "config": {**new["config"], "fusion": "tifu"},
           "num_items": new["num_items"], "state_dict": new["state_dict"], "item_ids": new["item_ids"],
           "epoch": 1, "fusion": fusion.state(),
           "neighbour_choice": {"kind": "tifu-fusion", "weight": 0.4, "k": 10, "grid": [], "description": "x"}}
    torch.save(old, tmp_path / "old.pt")
    loaded = NeuralRecommender.from_checkpoint(tmp_path / "old.pt")
    assert isinstance(loaded.addon, FusionAddOn) and loaded.addon.weight == 0.4
    assert loaded.checkpoint["addon_choice"]["kind"] == "tifu-fusion" and "fusion" not in loaded.checkpoint
    np.testing.assert_array_equal(loaded.score(data, sp["test"]), rec.score(data, sp["test"]))
