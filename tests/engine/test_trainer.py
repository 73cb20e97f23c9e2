"""Training: the loss falls, the model learns a planted signal, seeds repeat, resume is exact."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from basketgnn.data.split import make_split
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.recommenders.topfreq import GTopFreq
from basketgnn.workflow.harness import evaluate_model
from tests.support.planted import planted_data

FAST = dict(lr=1e-2, batch_size=32, embed_dim=16, patience=50)


def fit(data, out_dir=None, **kw):
    sp = make_split(data, "temporal")
    rec = NeuralRecommender(SPEC, DNNTSPConfig(**{**FAST, **kw}), out_dir=out_dir)
    rec.fit(data, sp["train"], sp["validate"])
    return rec, sp


def test_training_from_shared_scores_equals_the_dense_loss():
    """DNNTSP's default trains from the scores in shared form (``sparse_loss``); the same run
    through the dense [B, I] scores and the loss on them gives the same epoch losses to float
    rounding."""
    data = planted_data(n_users=80)
    assert SPEC.sparse_loss is not None and SPEC.sparse_loss(DNNTSPConfig(**FAST)) is not None
    sp = make_split(data, "temporal")
    runs = []
    for spec in (SPEC, dataclasses.replace(SPEC, sparse_loss=None)):
        rec = NeuralRecommender(spec, DNNTSPConfig(**FAST, epochs=3))
        rec.fit(data, sp["train"], sp["validate"])
        runs.append(rec)
    losses = [[r["train_loss"] for r in rec.result.history] for rec in runs]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    # The weights are not compared: Adam turns float32 rounding in gradients that are zero in
    # exact arithmetic (a Linear's bias before BatchNorm) into full steps of either sign.
    # tests/models/test_dnntsp_shared_loss.py compares one batch's gradients in float64.


@pytest.mark.parametrize("changes", [{"loss": "mse"}, {"user_context": True}, {"explore_attention": True}])
def test_configurations_without_the_shared_form_keep_the_dense_loss(changes):
    assert SPEC.sparse_loss is not None and SPEC.sparse_loss(DNNTSPConfig(**FAST, **changes)) is None


def test_loss_falls_and_beats_popularity_on_planted_signal():
    data = planted_data()
    # From all logits at 0 (item_prior off), so that the fall of the loss is the model's doing.
    rec, sp = fit(data, epochs=25, item_prior=False)
    losses = [r["train_loss"] for r in rec.result.history]
    assert losses[-1] < 0.5 * losses[0]
    dnntsp, _ = evaluate_model(rec, data, sp["test"])
    popular, _ = evaluate_model(GTopFreq().fit(data, sp["train"]), data, sp["test"])
    assert dnntsp["recall@10"] > popular["recall@10"] + 0.2


def test_same_seed_same_metrics_other_seed_differs():
    data = planted_data(n_users=80)
    a, _ = fit(data, epochs=3, seed=1)
    b, _ = fit(data, epochs=3, seed=1)
    c, _ = fit(data, epochs=3, seed=2)
    key = ["train_loss", "val_mean_ndcg"]
    assert [[r[k] for k in key] for r in a.result.history] == [[r[k] for k in key] for r in b.result.history]
    assert [r["train_loss"] for r in a.result.history] != [r["train_loss"] for r in c.result.history]


def test_interrupted_run_resumes_to_identical_result(tmp_path):
    data = planted_data(n_users=80)
    whole, _ = fit(data, tmp_path / "whole", epochs=6)
    fit(data, tmp_path / "cut", epochs=3)  # "killed" after epoch 3
    resumed, _ = fit(data, tmp_path / "cut", epochs=6)
    assert [r["epoch"] for r in resumed.result.history] == list(range(1, 7))
    for a, b in zip(whole.result.history, resumed.result.history):
        assert a["train_loss"] == b["train_loss"] and a["val_mean_ndcg"] == b["val_mean_ndcg"]
    for k, v in whole.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    log = [json.loads(line) for line in (tmp_path / "cut" / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == list(range(1, 7))
    assert (tmp_path / "cut" / "best.pt").is_file()


def test_cosine_schedule_follows_its_formula_and_resumes_exactly(tmp_path):
    data = planted_data(n_users=80)
    whole, _ = fit(data, tmp_path / "whole", epochs=6, lr_schedule="cosine")
    lr = FAST["lr"]
    # The log's lr is the one after epoch e (the next epoch's, as with plateau): it trained with
    # lr * (1 + cos(pi * (e - 1) / 6)) / 2 and logs lr * (1 + cos(pi * e / 6)) / 2.
    want = [lr * (1 + np.cos(np.pi * e / 6)) / 2 for e in range(1, 7)]
    np.testing.assert_allclose([r["lr"] for r in whole.result.history], want, rtol=1e-9, atol=1e-15)

    class Killed(Exception):
        pass

    def kill_after_3(record):
        if record["epoch"] == 3:
            raise Killed  # after epoch 3's files are written, as a kill would leave them

    sp = make_split(data, "temporal")
    config = DNNTSPConfig(**{**FAST, "epochs": 6, "lr_schedule": "cosine"})
    with pytest.raises(Killed):
        NeuralRecommender(SPEC, config, out_dir=tmp_path / "killed", on_epoch=kill_after_3).fit(
            data, sp["train"], sp["validate"])
    resumed_from_3, _ = fit(data, tmp_path / "killed", epochs=6, lr_schedule="cosine")
    assert [r["epoch"] for r in resumed_from_3.result.history] == list(range(1, 7))
    for a, b in zip(whole.result.history, resumed_from_3.result.history):
        assert a["train_loss"] == b["train_loss"] and a["lr"] == b["lr"]
    for k, v in whole.model.state_dict().items():
        assert torch.equal(v, resumed_from_3.model.state_dict()[k]), k


def test_cosine_schedule_length_is_part_of_the_run(tmp_path):
    data = planted_data(n_users=80)
    fit(data, tmp_path, epochs=2, lr_schedule="cosine")
    longer, _ = fit(data, tmp_path, epochs=4, lr_schedule="cosine")  # another schedule: a new run
    assert [r["epoch"] for r in longer.result.history] == [1, 2, 3, 4]
    assert longer.result.history[1]["lr"] == pytest.approx(FAST["lr"] / 2)  # after epoch 2 of 4


def test_resume_is_not_used_for_a_different_config(tmp_path):
    data = planted_data(n_users=80)
    fit(data, tmp_path, epochs=2)
    other, _ = fit(data, tmp_path, epochs=2, lr=5e-3)
    assert [r["epoch"] for r in other.result.history] == [1, 2]


def test_early_stopping_keeps_best_epoch():
    data = planted_data(n_users=80)
    rec, _ = fit(data, epochs=40, patience=2, lr=0.05, min_steps=0)  # patience alone (2 steps an epoch)
    hist = rec.result.history
    best = max(hist, key=lambda r: r["val_mean_ndcg"])
    assert rec.result.best_epoch == best["epoch"]
    assert len(hist) <= 40 and len(hist) - rec.result.best_epoch <= 2


@pytest.mark.parametrize("loss", ["bpr", "mse"])
def test_other_losses_train(loss):
    data = planted_data(n_users=120)
    rec, _ = fit(data, epochs=6, loss=loss)
    assert rec.result.history[-1]["train_loss"] < rec.result.history[0]["train_loss"]


def test_small_catalogue_uses_the_cut_offs_that_fit():
    data = planted_data(n_users=80, n_items=25)
    rec, sp = fit(data, epochs=2)
    assert "val_ndcg@20" in rec.result.history[0] and "val_ndcg@40" not in rec.result.history[0]
    metrics, _ = evaluate_model(rec, data, sp["test"])
    assert "recall@20" in metrics and "recall@30" not in metrics


def test_item_prior_starts_training_at_popularity():
    """With item_prior the first epoch's loss is far below the all-logits-0 start (log 2)."""
    data = planted_data(n_users=80)
    plain, _ = fit(data, epochs=1, lr=1e-3, item_prior=False)
    prior, _ = fit(data, epochs=1, lr=1e-3, item_prior=True)  # a switch, off by default
    assert plain.result.history[0]["train_loss"] > 0.5
    assert prior.result.history[0]["train_loss"] < 0.5 * plain.result.history[0]["train_loss"]


def test_base_rate_init_starts_training_at_the_base_rate():
    """With base_rate_init the output bias starts at the log-odds of the targets' share of the
    catalogue, the first epoch's loss is far below the all-logits-near-0 start (log 2), and
    nothing but that bias differs from the plain start of the same seed."""
    data = planted_data(n_users=80)
    plain, sp = fit(data, epochs=1, lr=1e-3)
    based, _ = fit(data, epochs=1, lr=1e-3, base_rate_init=True)
    assert plain.result.history[0]["train_loss"] > 0.5
    assert based.result.history[0]["train_loss"] < 0.5 * plain.result.history[0]["train_loss"]
    targets = data.targets(sp["train"].users, sp["train"].n_history)
    rate = len(targets.values) / (len(sp["train"]) * data.n_items)
    fresh = {}
    for on in (False, True):
        torch.manual_seed(0)
        module = SPEC.build(data.n_items, DNNTSPConfig(**{**FAST, "base_rate_init": on}))
        SPEC.init(module, data, sp["train"], DNNTSPConfig(**{**FAST, "base_rate_init": on}))
        fresh[on] = module.state_dict()
    assert fresh[True]["scorer.out.bias"].item() == pytest.approx(np.log(rate / (1 - rate)), rel=1e-6)
    assert [k for k in fresh[True] if not torch.equal(fresh[True][k], fresh[False][k])] == ["scorer.out.bias"]


@pytest.fixture
def flat_validation(monkeypatch):
    """Validation whose criterion never improves after epoch 1 (the real metrics otherwise)."""
    import basketgnn.engine.trainer as trainer

    real = trainer.validation_metrics

    def flat(*args, **kwargs):
        return {**real(*args, **kwargs), "mean_ndcg": 0.1}

    monkeypatch.setattr(trainer, "validation_metrics", flat)


def test_min_steps_holds_off_early_stopping_and_a_reached_one_changes_nothing(flat_validation):
    # Validation that never improves after epoch 1: patience 2 stops after epoch 3 unless
    # min_steps asks for more steps.
    data = planted_data(n_users=80)
    stopped, _ = fit(data, epochs=20, patience=2, min_steps=0)
    assert stopped.result.epochs_run == 3 and stopped.result.best_epoch == 1
    steps = stopped.result.history[0]["steps"]
    held, _ = fit(data, epochs=20, patience=2, min_steps=5 * steps)
    assert held.result.epochs_run == 5 and held.result.best_epoch == 1
    same, _ = fit(data, epochs=20, patience=2, min_steps=3 * steps)
    drop = lambda h: [{k: v for k, v in r.items() if not k.endswith("_s")} for r in h]  # noqa: E731
    assert drop(same.result.history) == drop(stopped.result.history)


def test_min_steps_counts_the_steps_of_epochs_before_a_resume(flat_validation, tmp_path):
    # A run stopped by patience after 3 epochs, rerun with min_steps of 5 epochs' steps: it
    # resumes (min_steps only says when to stop) and trains epochs 4 and 5, not 5 more.
    data = planted_data(n_users=80)
    first, _ = fit(data, tmp_path, epochs=20, patience=2, min_steps=0)
    assert first.result.epochs_run == 3
    steps = first.result.history[0]["steps"]
    again, _ = fit(data, tmp_path, epochs=20, patience=2, min_steps=5 * steps)
    assert again.result.epochs_run == 5
    assert again.result.history[:3] == first.result.history  # resumed, not retrained


def test_the_item_cap_bounds_training_and_never_scoring():
    # The same trained module scores the same with any train_history_items: the cap only
    # builds training batches.
    data = planted_data(n_users=80)
    rec, sp = fit(data, epochs=1, train_history_items=3)
    assert rec.result.left_out_baskets["train"] > 0 and "validate" not in rec.result.left_out_baskets
    capped = rec.score(data, sp["test"])
    rec.config = rec.config.model_copy(update={"train_history_items": 0})
    np.testing.assert_array_equal(rec.score(data, sp["test"]), capped)


def test_work_bound_splits_long_batches_and_a_loose_one_changes_nothing():
    data = planted_data(n_users=120)
    loose, _ = fit(data, epochs=2, batch_work=10**9)
    default, _ = fit(data, epochs=2)
    off, _ = fit(data, epochs=2, batch_work=0)
    drop_times = [{k: v for k, v in r.items() if not k.endswith("_s")} for r in off.result.history]
    for rec in (loose, default):  # no batch of this data reaches either bound
        assert [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rec.result.history] == drop_times
    tight, _ = fit(data, epochs=2, batch_work=60)  # 32 customers x ~8 nodes x T 8 > 60
    assert tight.result.history[0]["steps"] > 2 * off.result.history[0]["steps"]
    assert np.isfinite(tight.result.history[-1]["train_loss"])


def test_history_cap_is_reported(tmp_path):
    data = planted_data(n_users=60)
    rec, sp = fit(data, tmp_path, epochs=1, max_history=3)
    T = np.asarray(sp["train"].n_history)
    assert rec.result.left_out_baskets["train"] == int(np.maximum(T - 3, 0).sum()) > 0
    extras = torch.load(tmp_path / "best.pt", weights_only=False)
    assert extras["extras"]["left_out_baskets"] == rec.result.left_out_baskets
    uncapped, _ = fit(data, epochs=1)
    assert uncapped.result.left_out_baskets == {}
