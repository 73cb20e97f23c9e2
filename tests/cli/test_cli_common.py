"""What the commands share (basketgnn/cli/common.py): the smallest cut-off, the line printed per
epoch, the results table, and a checkpoint's recommender with its data aligned to its catalogue."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import numpy as np
import pytest

from basketgnn.cli.common import checkpoint_and_data, epoch_printer, first_k, print_results
from basketgnn.data.dataset import BasketData
from basketgnn.errors import UserError
from tests.support.cli import make_checkpoint


def test_first_k_is_the_smallest_recall_cut_off_of_the_prefix():
    metrics = {"recall@20": 0.2, "recall@10": 0.1, "ndcg@5": 0.3, "val_recall@5": 0.4, "val_recall@40": 0.5}
    assert first_k(metrics) == 10  # ndcg@5 is no recall; val_recall@5 has another prefix
    assert first_k(metrics, "val_") == 5


def test_epoch_line_shows_the_first_cut_off_the_elapsed_time_and_best(capsys):
    record = {"epoch": 3, "train_loss": 0.12345, "val_recall@5": 0.5, "val_ndcg@5": 0.25,
              "val_recall@10": 0.75, "val_ndcg@10": 0.5, "val_mean_ndcg": 0.3, "train_s": 1.54}  # fmt: skip
    show = epoch_printer(time.perf_counter() - 42, indent="   ")
    show({**record, "best": True})
    show({**record, "best": False})
    best, other = capsys.readouterr().out.splitlines()
    expected = "   epoch   3  loss 0.1235  val recall@5 0.5000  ndcg@5 0.2500  mean ndcg 0.3000  1.5s  "
    assert best.startswith(expected) and other.startswith(expected)
    assert re.fullmatch(r"\[(\d+)s\]  best", best[len(expected) :])
    assert 42 <= int(re.fullmatch(r"\[(\d+)s\]", other[len(expected) :]).group(1)) < 100


def test_results_table_has_the_plain_metrics_of_every_cut_off_and_the_times(capsys):
    def record(model: str, recall: float, fit: float) -> dict:
        metrics = {f"{m}@{k}": recall / k for k in (10, 20) for m in ("recall", "ndcg", "phr")}
        metrics |= {"repeat_recall@10": 0.9, "explore_recall@10": 0.1}
        return {"model": model, "data": "ds", "split": "temporal", "part": "test", "n_users": 1234,
                "metrics": metrics, "timing_s": {"fit": fit, "score": 0.25}}  # fmt: skip

    print_results([record("p-topfreq", 0.3, 1.0), record("dnntsp", 0.4, 2.0)])
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "ds · split temporal · part test (1,234 users)"
    assert "repeat_" not in out and "explore_" not in out
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.count("│") >= 3]
    assert rows == ["recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20", "phr@20", "fit+score s"]
    times = next(line for line in out.splitlines() if "fit+score s" in line)
    assert re.search(r"1\.25\s*│\s*2\.25", times)
    header = next(line for line in out.splitlines() if "metric" in line)
    assert header.index("p-topfreq") < header.index("dnntsp")


@pytest.fixture(scope="module")
def fused_checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"))


def test_checkpoint_data_is_the_recorded_one_unless_named(fused_checkpoint, tmp_path, capsys):
    ckpt, data = fused_checkpoint
    recommender, dataset, path = checkpoint_and_data(ckpt, None, None)
    assert path == ckpt.parent / "data" and list(recommender.item_ids) == list(data.item_ids)
    assert np.array_equal(dataset.items, data.items) and capsys.readouterr().err == ""
    # Other data whose item 0 the checkpoint does not know: its entries are dropped, with a warning.
    other = replace(data, item_ids=np.asarray(["no-such-item", *data.item_ids[1:]]))
    other.save(tmp_path / "other")
    _, aligned, path = checkpoint_and_data(ckpt, tmp_path / "other", None)
    dropped = int((data.items == 0).sum())
    assert path == tmp_path / "other" and dropped > 0
    assert len(aligned.items) == len(data.items) - dropped and 0 not in set(aligned.items.tolist())
    warning = " ".join(capsys.readouterr().err.split())
    assert f"warning: {dropped} basket entries of {tmp_path / 'other'} hold items the checkpoint does not know" in warning
    assert BasketData.load(tmp_path / "other").item_ids[0] == "no-such-item"


def test_a_checkpoint_without_its_data_needs_data(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path, record_data=False)
    with pytest.raises(UserError, match=r"best\.pt does not record its data; pass --data"):
        checkpoint_and_data(ckpt, None, None)
    _, dataset, path = checkpoint_and_data(ckpt, tmp_path / "data", None)
    assert path == tmp_path / "data" and dataset.n_users > 0
