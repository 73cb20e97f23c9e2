"""What the training loop does around its epochs: early stopping, the best epoch, and the run
folder's files (written by one process only)."""

from __future__ import annotations

import json

import numpy as np
import torch
from torch import nn

from basketgnn.engine.callbacks import Best, EarlyStopping, RunFiles
from basketgnn.models.dnntsp import DNNTSPConfig


def test_early_stopping_waits_for_patience_and_min_steps():
    stop = EarlyStopping(patience=2, min_steps=10)
    for steps, improved in [(4, True), (4, False), (4, False)]:
        assert not stop.should_stop()
        stop.update(improved, steps)
    assert stop.stale == 2 and stop.steps_done == 12 and stop.should_stop()
    held = EarlyStopping(patience=2, min_steps=100, stale=5, steps_done=99)
    assert not held.should_stop()  # stale long enough, but too few steps
    held.update(True, 1)
    assert held.stale == 0 and not held.should_stop()


def test_best_keeps_a_copy_of_the_weights_of_its_epoch():
    module = nn.Linear(2, 1)
    best = Best()
    assert best.improves({"mean_ndcg": 0.0}) and best.state is None
    best.take(3, {"mean_ndcg": 0.4}, module)
    with torch.no_grad():
        module.weight.add_(1.0)  # training goes on; the kept weights do not move
    assert not torch.equal(best.state["weight"], module.weight)
    assert not best.improves({"mean_ndcg": 0.4}) and best.improves({"mean_ndcg": 0.41})
    again = Best.from_dict(best.as_dict())
    assert (again.epoch, again.metrics) == (3, {"mean_ndcg": 0.4})


def test_run_files_write_log_resume_and_best_and_read_back_only_the_same_run(tmp_path):
    config = DNNTSPConfig(embed_dim=8)
    module = nn.Linear(2, 1)
    optimizer = torch.optim.Adam(module.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    files = RunFiles(tmp_path, True, "dnntsp", config, np.array(["a", "b"]), {"mine": 1})
    files.start()
    best = Best()
    best.take(1, {"mean_ndcg": 0.2}, module)
    files.save_best(module, 1, {"mean_ndcg": 0.2}, "fp")
    record = {"epoch": 1, "train_loss": 0.5}
    files.end_epoch(record, module, optimizer, scheduler, best, [record], "key")
    assert [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()] == [record]
    state = torch.load(tmp_path / "best.pt", weights_only=False)
    assert state["extras"] == {"epoch": 1, "validation": {"mean_ndcg": 0.2}, "data_fingerprint": "fp", "mine": 1}
    resumed = files.load_resume("key")
    assert resumed["epoch"] == 1 and resumed["history"] == [record]
    assert files.load_resume("other data") is None
    other = RunFiles(tmp_path, True, "dnntsp", config.model_copy(update={"lr": 0.5}), np.array(["a", "b"]))
    assert other.load_resume("key") is None  # another config: a new run
    same = RunFiles(tmp_path, True, "dnntsp", config.model_copy(update={"threads": 3, "epochs": 7}), np.array(["a"]))
    assert same.load_resume("key") is not None  # threads and epochs do not change the run
    files.rewrite_log([])
    assert (tmp_path / "train_log.jsonl").read_text() == ""
    files.clear()
    assert list(tmp_path.iterdir()) == []


def test_run_files_of_another_rank_or_without_a_folder_write_nothing(tmp_path):
    config = DNNTSPConfig(embed_dim=8)
    module = nn.Linear(2, 1)
    optimizer = torch.optim.Adam(module.parameters())
    for files in (RunFiles(tmp_path / "r1", False, "dnntsp", config, np.array(["a"])),
                  RunFiles(None, True, "dnntsp", config, np.array(["a"]))):  # fmt: skip
        files.start()
        files.save_best(module, 1, {"mean_ndcg": 0.2}, "fp")
        files.end_epoch({"epoch": 1}, module, optimizer, None, Best(), [], "key")
        files.add_to_best(warm_start={})
        assert files.load_resume("key") is None
    assert not (tmp_path / "r1").exists()
