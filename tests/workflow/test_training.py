"""The one train: a neural model trained by the engine, then its fusion with TIFU-KNN chosen on
validation and stored as the checkpoint's own section; load_trained reads both back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn import workflow
from basketgnn.data.split import make_split
from basketgnn.engine.checkpoint import load_checkpoint
from basketgnn.errors import UserError
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.recommenders.reranked import RerankedRecommender
from basketgnn.recommenders.topfreq import PTopFreq
from basketgnn.workflow.training import settings
from tests.support.planted import planted_data

TINY = {"embed_dim": 8, "batch_size": 32, "lr": 1e-2, "threads": 1}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    entry = workflow.ModelEntry("dnntsp", {**TINY, "epochs": 3}, out_dir=folder,
                                stamp=workflow.data_stamp(folder / "data", "temporal"))  # fmt: skip
    return workflow.train(entry, data, sp), data, sp, folder


def test_train_stores_the_fusion_choice_as_a_section_and_load_trained_ranks_alike(trained):
    outcome, data, sp, folder = trained
    assert outcome.training.epochs_run == 3 and outcome.fusion is not None
    ckpt = load_checkpoint(folder / "best.pt")
    section = ckpt.sections["fusion"]
    assert section["choice"] == outcome.fusion and section["options"]["fusion"] == "tifu"
    assert ckpt.extras["data"] == str((folder / "data").resolve()) and ckpt.extras["split_spec"] == "temporal"
    fused = outcome.fusion["weight"] > 0
    shipped = getattr(outcome.recommender, "shipped", outcome.recommender)  # inside the stage where kept
    assert isinstance(shipped, FusedRecommender) == fused == (section["state"] is not None)
    # The re-ranking stage (on by default) is learned over what the fusion ships and stored beside it.
    assert outcome.rerank is not None and ckpt.sections["rerank"]["choice"] == outcome.rerank
    assert isinstance(outcome.recommender, RerankedRecommender) == outcome.rerank["kept"]
    loaded = workflow.load_trained(folder / "best.pt")
    assert type(loaded) is type(outcome.recommender)
    for a, b in zip(loaded.rank(data, sp["test"], 10), outcome.recommender.rank(data, sp["test"], 10)):
        np.testing.assert_array_equal(a, b)
    alone = workflow.load_trained(folder / "best.pt", model_only=True)
    assert isinstance(alone, NeuralRecommender)


def test_fusion_options_act_after_training_and_never_restart_it(trained, tmp_path):
    outcome, data, sp, folder = trained
    written = (folder / "resume.pt").stat().st_mtime_ns
    entry = workflow.ModelEntry("dnntsp", {**TINY, "epochs": 3, "fusion": "off"}, out_dir=folder)
    off = workflow.train(entry, data, sp)
    assert (folder / "resume.pt").stat().st_mtime_ns == written  # resumed: nothing trained again
    assert off.training.history == outcome.training.history and off.fusion is None
    assert isinstance(off.recommender, NeuralRecommender)
    assert load_checkpoint(folder / "best.pt").sections["fusion"] == {
        "options": {"fusion": "off", "transitions": True, "rerank": False, "rerank_pairs": 150, "neighbour_pool_cap": 20_000,
                    "fusion_criterion": "mean"},
        "chosen": True, "choice": None, "state": None,
    }  # fmt: skip
    assert isinstance(workflow.load_trained(folder / "best.pt"), NeuralRecommender)


def test_a_run_stopped_before_its_fusion_ranks_by_the_model_alone_with_a_warning(trained, tmp_path):
    _, _, _, folder = trained
    state = torch.load(folder / "best.pt", weights_only=False)
    state["sections"] = {}
    state["extras"]["fusion_options"] = {"fusion": "tifu"}
    torch.save(state, tmp_path / "stopped.pt")
    with pytest.warns(UserWarning, match="stopped before choosing its fusion"):
        rec = workflow.load_trained(tmp_path / "stopped.pt")
    assert isinstance(rec, NeuralRecommender)
    # Stopped during the choice: the section says "not chosen yet".
    tifu = {"fusion": "tifu", "transitions": True, "neighbour_pool_cap": 20_000}
    state["sections"] = {"fusion": {"options": tifu, "chosen": False, "choice": None, "state": None}}
    state["extras"]["fusion_options"] = {"fusion": "off"}  # an earlier run's, overruled by the section
    torch.save(state, tmp_path / "choosing.pt")
    with pytest.warns(UserWarning, match="stopped before choosing its fusion"):
        assert isinstance(workflow.load_trained(tmp_path / "choosing.pt"), NeuralRecommender)
    # A section that cannot be read is a user error naming the file.
    state["sections"] = {"fusion": {"options": tifu, "chosen": True, "choice": {}, "state": {"weight": 0.5}}}
    torch.save(state, tmp_path / "broken.pt")
    with pytest.raises(UserError, match=r"broken\.pt: its fusion section cannot be read .*train it again"):
        workflow.load_trained(tmp_path / "broken.pt")


def test_a_baseline_is_fitted_in_memory_and_takes_no_warm_start():
    data = planted_data(n_users=40, n_items=20)
    sp = make_split(data, "temporal")
    outcome = workflow.train(workflow.ModelEntry("p-topfreq"), data, sp)
    assert isinstance(outcome.recommender, PTopFreq) and outcome.training is None and outcome.fusion is None
    with pytest.raises(UserError, match="p-topfreq is a baseline: only trained models start from a checkpoint"):
        workflow.train(workflow.ModelEntry("p-topfreq", warm_start="x.pt"), data, sp)


def test_settings_come_from_a_mapping_or_as_given():
    s = settings(workflow.ModelEntry("dnntsp", {"embed_dim": 8, "fusion": "off"}))
    assert s.model.embed_dim == 8 and s.fusion.fusion == "off"
    assert settings(workflow.ModelEntry("dnntsp", s)) is s
