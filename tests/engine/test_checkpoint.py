"""Checkpoints: one model-agnostic file with a format version; a file of another version, another
model or no checkpoint at all stops with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.split import make_split
from basketgnn.engine.checkpoint import (
    CHECKPOINT_FORMAT,
    add_extras,
    load_checkpoint,
    save_checkpoint,
    set_section,
)
from basketgnn.errors import UserError
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.recommenders.neural import NeuralRecommender
from tests.support.planted import planted_data


def _trained(tmp_path):
    data = planted_data(n_users=60)
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(epochs=1, embed_dim=8), out_dir=tmp_path, extras={"mine": 1})
    rec.fit(data, sp["train"], sp["validate"])
    return rec, data, sp


def test_a_checkpoint_names_its_model_and_loads_as_trained(tmp_path):
    rec, data, sp = _trained(tmp_path)
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    assert state["model"] == "dnntsp" and state["format"] == CHECKPOINT_FORMAT
    assert state["extras"]["epoch"] == 1 and state["extras"]["mine"] == 1
    assert len(state["item_ids"]) == data.n_items and state["sections"] == {}
    ckpt = load_checkpoint(tmp_path / "best.pt")
    assert ckpt.model_name == "dnntsp" and ckpt.config == rec.config
    loaded, section = NeuralRecommender.from_checkpoint(tmp_path / "best.pt")
    assert section is None  # the engine writes no fusion
    np.testing.assert_array_equal(loaded.score(data, sp["test"]), rec.score(data, sp["test"]))


def test_extras_and_sections_are_added_in_place(tmp_path):
    _trained(tmp_path)
    add_extras(tmp_path / "best.pt", data="/somewhere", split_spec="temporal")
    set_section(tmp_path / "best.pt", "fusion", {"choice": {"weight": 0.5}})
    ckpt = load_checkpoint(tmp_path / "best.pt")
    assert ckpt.extras["data"] == "/somewhere" and ckpt.extras["epoch"] == 1
    assert ckpt.sections == {"fusion": {"choice": {"weight": 0.5}}}
    set_section(tmp_path / "best.pt", "fusion", {"choice": None})  # replaced, not merged
    assert load_checkpoint(tmp_path / "best.pt").sections == {"fusion": {"choice": None}}


def test_an_older_format_says_to_train_again(tmp_path):
    _trained(tmp_path)
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    for old in ("basketgnn-checkpoint/2", "basketgnn-dnntsp-checkpoint/1"):
        torch.save({**state, "format": old}, tmp_path / "old.pt")
        with pytest.raises(UserError, match=rf"old\.pt: a checkpoint of format {old}.*Train the model again"):
            load_checkpoint(tmp_path / "old.pt")


def test_unknown_model_and_junk_are_clear_errors(tmp_path):
    _trained(tmp_path)
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    torch.save({**state, "model": "gone-model"}, tmp_path / "other.pt")
    with pytest.raises(UserError, match=r"other\.pt: unknown trainable model 'gone-model'"):
        load_checkpoint(tmp_path / "other.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a basketgnn checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"weights": 1}, tmp_path / "dict.pt")
    with pytest.raises(UserError, match="not a basketgnn checkpoint"):
        load_checkpoint(tmp_path / "dict.pt")
    with pytest.raises(UserError, match="no such checkpoint file"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_config_of_another_version_is_a_clear_error(tmp_path):
    rec, data, _ = _trained(tmp_path)
    save_checkpoint(tmp_path / "odd.pt", "dnntsp", rec.model, rec.config, data.item_ids, {})
    state = torch.load(tmp_path / "odd.pt", weights_only=False)
    state["config"]["an_option_of_tomorrow"] = 1
    torch.save(state, tmp_path / "odd.pt")
    with pytest.raises(UserError, match=r"odd\.pt: written by an incompatible basketgnn version"):
        load_checkpoint(tmp_path / "odd.pt")
