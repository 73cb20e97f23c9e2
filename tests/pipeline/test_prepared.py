"""The pipeline's data stages in their streamed forms: the prepare stage's dataset folder (DuckDB
streamed into its arrays file) holds what preparing the log in memory gives, and the split
stage's ``split.npz`` loads as the split made in memory."""

from __future__ import annotations

import json

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import prepare_log
from basketgnn.data.split import load_split, save_split, temporal_split
from basketgnn.pipeline.prepared import SPLIT_FILE, split_file

NAMES = ["items", "basket_offsets", "user_offsets", "basket_times", "user_ids", "item_ids", "user_part"]


def _stage(run_dir, name):
    (folder,) = (run_dir / "stages").glob(f"{name}-*")
    return folder


def test_the_prepare_stage_holds_the_in_memory_preparation(first, log):
    config, _ = first
    run_dir = config.parent / "run"
    stored = BasketData.load(_stage(run_dir, "prepare") / "data")
    expected = prepare_log(log[0])
    for name in NAMES:
        a, b = getattr(stored, name), getattr(expected, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert not stored.items.flags.writeable  # a map of the file
    meta = json.loads((_stage(run_dir, "prepare") / "data" / "meta.json").read_text())
    assert meta["report"] == expected.meta["report"] and meta["n_entries"] == len(expected.items)


def test_the_split_stage_writes_arrays_that_load_as_the_split(first, tmp_path):
    config, _ = first
    run_dir = config.parent / "run"
    data = BasketData.load(_stage(run_dir, "prepare") / "data")
    folder = _stage(run_dir, "split")
    assert split_file(folder) == folder / SPLIT_FILE and not (folder / "split.json").exists()
    got, expected = load_split(folder / SPLIT_FILE, data), temporal_split(data)
    assert got.name == expected.name
    for p in expected.parts:
        assert np.array_equal(got[p].users, expected[p].users)
        assert np.array_equal(got[p].n_history, expected[p].n_history)
    # a stage folder holding the JSON form only is read as such
    save_split(expected, data, tmp_path / "split.json")
    assert split_file(tmp_path) == tmp_path / "split.json"


def test_the_split_stage_keeps_the_sample_that_evaluate_holds_out(log, tmp_path):
    import copy

    from basketgnn.data.sample import sampled_customers
    from basketgnn.pipeline.prepared import SAMPLE_MASK
    from tests.support.pipeline import BASELINES_ONLY, run, write_job

    job = write_job(tmp_path / "h", log[0], **copy.deepcopy(BASELINES_ONLY),
                    train={"sample_customers": 60, "sample_seed": 2}, evaluate={"held_out": True})  # fmt: skip
    summary = run(job)
    run_dir = tmp_path / "h" / "run"
    data = BasketData.load(_stage(run_dir, "prepare") / "data")
    mask = np.load(_stage(run_dir, "split") / SAMPLE_MASK)
    assert np.array_equal(mask, sampled_customers(data.user_ids, 60, 2)) and mask.sum() == 60
    test = load_split(_stage(run_dir, "split") / SPLIT_FILE, data)["test"]
    metrics = json.loads(summary["outputs"]["metrics"].read_text())
    assert all(m["n_users"] == int((~mask[test.users]).sum()) for m in metrics["models"])


def test_a_prepared_dataset_folder_is_an_input(first, tmp_path):
    import copy

    from tests.support.pipeline import BASELINES_ONLY, run, write_job

    config, _ = first
    source = _stage(config.parent / "run", "prepare") / "data"
    summary = run(write_job(tmp_path / "p", source, **copy.deepcopy(BASELINES_ONLY)))
    assert summary["ran"][0] == "prepare"
    copied = BasketData.load(_stage(tmp_path / "p" / "run", "prepare") / "data")
    original = BasketData.load(source)
    for name in NAMES:
        assert np.array_equal(getattr(copied, name), getattr(original, name)), name
    again = run(write_job(tmp_path / "p", source, **copy.deepcopy(BASELINES_ONLY)))
    assert "prepare" in again["cached"]  # the folder's files are the stage's key
