"""Checkpoints: one model-agnostic file, and DNNTSP checkpoints written before the engine
(format basketgnn-dnntsp-checkpoint/1) still load and rank the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_trainer import planted_data

from basketgnn.data.split import make_split
from basketgnn.engine.addons import NeighbourAddOn
from basketgnn.engine.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, stamp_checkpoint
from basketgnn.engine.recommender import NeuralRecommender
from basketgnn.errors import UserError
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig
from basketgnn.models.neighbours import NeighbourPool


def _legacy_checkpoint(path, data, train, with_neighbours: bool) -> tuple[DNNTSP, NeighbourPool | None]:
    """A checkpoint exactly as train/checkpoint.py wrote it before the engine (its dict layout)."""
    config = DNNTSPConfig(embed_dim=8, neighbour_weight=0.3 if with_neighbours else 0)
    torch.manual_seed(0)
    model = DNNTSP.from_config(data.n_items, config)
    state = {
        "format": "basketgnn-dnntsp-checkpoint/1",
        "config": config.model_dump(exclude={"fusion"}),  # the option came later
        "num_items": model.num_items,
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "item_ids": [str(i) for i in data.item_ids.tolist()],
        "epoch": 3,
        "validation": {"mean_ndcg": 0.5},
        "data_fingerprint": "abc",
        "data": "/somewhere/data",
        "split_spec": "temporal",
    }
    pool = None
    if with_neighbours:
        pool = NeighbourPool.build(data, train, k=5)
        state["neighbours"] = {**pool.state(), "weight": 0.3}
        state["neighbour_choice"] = {"k": 5, "weight": 0.3, "grid": []}
    torch.save(state, path)
    return model.eval(), pool


@pytest.mark.parametrize("with_neighbours", [False, True])
def test_a_legacy_dnntsp_checkpoint_loads_and_scores_as_its_model(tmp_path, with_neighbours):
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    model, pool = _legacy_checkpoint(tmp_path / "old.pt", data, sp["train"], with_neighbours)
    rec = NeuralRecommender.from_checkpoint(tmp_path / "old.pt")
    assert rec.name == "dnntsp" and rec.checkpoint["epoch"] == 3
    assert rec.checkpoint["split_spec"] == "temporal" and rec.checkpoint["data"] == "/somewhere/data"
    fresh = NeuralRecommender(SPEC, rec.config)
    fresh.model, fresh.item_ids = model, data.item_ids
    if with_neighbours:
        assert rec.addon is not None and rec.addon.weight == 0.3 and rec.addon.pool.k == 5
        assert rec.checkpoint["addon_choice"]["weight"] == 0.3
        fresh.addon = NeighbourAddOn(pool, 0.3)
    else:
        assert rec.addon is None
    np.testing.assert_array_equal(rec.score(data, sp["test"]), fresh.score(data, sp["test"]))
    # Stamping rewrites it in today's format, keeping everything.
    stamp_checkpoint(tmp_path / "old.pt", tmp_path, "temporal")
    assert torch.load(tmp_path / "old.pt", weights_only=False)["format"] == CHECKPOINT_FORMAT
    again = NeuralRecommender.from_checkpoint(tmp_path / "old.pt")
    np.testing.assert_array_equal(again.score(data, sp["test"]), rec.score(data, sp["test"]))


def test_a_checkpoint_names_its_model_and_an_unknown_model_is_a_clear_error(tmp_path):
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=1, embed_dim=8, neighbour_weight=0), out_dir=tmp_path)
    rec.fit(data, sp["train"], sp["validate"])
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    assert state["model"] == "dnntsp" and state["format"] == CHECKPOINT_FORMAT
    assert state["extras"]["epoch"] == 1 and len(state["item_ids"]) == data.n_items
    assert load_checkpoint(tmp_path / "best.pt").model_name == "dnntsp"
    assert load_checkpoint(tmp_path / "best.pt").config.transitions is True  # today's default, stored
    before = {**state, "config": {k: v for k, v in state["config"].items() if k != "transitions"}}
    torch.save(before, tmp_path / "before.pt")  # written before item transitions existed
    assert load_checkpoint(tmp_path / "before.pt").config.transitions is False
    # Written before the item cap existed: it loads uncapped, whatever today's default is.
    assert load_checkpoint(tmp_path / "best.pt").config.train_history_items == 150  # today's default
    stored = {k: v for k, v in state["config"].items() if k != "train_history_items"}
    torch.save({**state, "config": {**stored, "train_history_items": 7}}, tmp_path / "capped.pt")
    assert load_checkpoint(tmp_path / "capped.pt").config.train_history_items == 7
    torch.save({**state, "config": stored}, tmp_path / "uncapped.pt")
    assert load_checkpoint(tmp_path / "uncapped.pt").config.train_history_items == 0
    torch.save({**state, "config": {**stored, "max_history_items": 9}}, tmp_path / "interim.pt")
    assert load_checkpoint(tmp_path / "interim.pt").config.train_history_items == 9  # its first name
    state["model"] = "gone-model"
    torch.save(state, tmp_path / "other.pt")
    with pytest.raises(UserError, match=r"other\.pt: unknown trainable model 'gone-model'"):
        load_checkpoint(tmp_path / "other.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a basketgnn checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
