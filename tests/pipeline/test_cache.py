"""The stage cache (basketgnn.pipeline.cache): stage keys, reuse of done stages, reruns of exactly
the stages a change touches, exact resume after a kill mid-training, the run folder's lock, and
outputs published as one set."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import basketgnn.engine.trainer as trainer
import basketgnn.io_utils as io_utils
from basketgnn import __version__
from basketgnn.errors import UserError
from basketgnn.fingerprint import settings_hash
from basketgnn.pipeline.cache import (
    CACHE_VERSION,
    DONE_FILE,
    Stage,
    StageCache,
    exclusive,
    stage_key,
)
from tests.support.pipeline import (
    ALL_STAGES,
    BASELINES_ONLY,
    DNNTSP,
    OUTPUTS,
    K,
    copy_of_run,
    raising_for,
    run,
    status,
    without_timings,
    write_job,
)


def test_settings_hash_is_the_sha256_of_sorted_json():
    obj = {"b": [1, "x", 0.5], "a": None, "p": Path("/tmp/x")}
    text = '{"a": null, "b": [1, "x", 0.5], "p": "/tmp/x"}'
    assert settings_hash(obj) == hashlib.sha256(text.encode()).hexdigest()
    assert settings_hash(obj, 16) == settings_hash(obj)[:16]
    assert settings_hash({"a": None, "b": [1, "x", 0.5], "p": "/tmp/x"}) == settings_hash(obj)


def test_a_stage_key_hashes_its_settings_dependencies_and_extra_as_sorted_json():
    """The serialisation that names the stage folders of existing run folders."""
    dep = Stage("prepare", "k" * 64, Path("/x"), {"output_hash": "abc"})
    key = stage_key("split", {"kind": "temporal"}, [dep], {"files": [["/log.csv", 10, 7]]})
    payload = {
        "cache_version": CACHE_VERSION, "basketgnn": __version__, "stage": "split",
        "settings": {"kind": "temporal"}, "deps": ["abc"], "files": [["/log.csv", 10, 7]],
    }  # fmt: skip
    assert key == hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    assert stage_key("split", {"kind": "random"}, [dep], {}) != stage_key("split", {"kind": "temporal"}, [dep], {})


def test_the_stage_cache_reuses_done_stages_clears_unfinished_ones_and_resumes_resumable_ones(tmp_path):
    lines: list[str] = []
    computed: list[str] = []

    def compute(folder: Path) -> dict[str, int]:
        computed.append(folder.name)
        return {"n": len(computed), "left": (folder / "left.txt").exists()}

    cache = StageCache(tmp_path, 3, lambda message, style=None: lines.append(message))
    a = cache.stage("prepare", {"x": 1}, [], compute)
    assert a.info["n"] == 1 and (a.dir / DONE_FILE).is_file() and a.dir.name == f"prepare-{a.key[:12]}"
    again = StageCache(tmp_path, 3, lambda message, style=None: lines.append(message))
    assert again.stage("prepare", {"x": 1}, [], compute).info == a.info and len(computed) == 1
    # An unfinished folder: cleared for an ordinary stage, kept for a resumable one.
    b_dir = tmp_path / "stages" / f"split-{stage_key('split', {}, [a], {})[:12]}"
    fit_dir = tmp_path / "stages" / f"fit_m-{stage_key('fit_m', {}, [a], {})[:12]}"
    for d in (b_dir, fit_dir):
        d.mkdir(parents=True)
        (d / "left.txt").write_text("x")
    assert again.stage("split", {}, [a], compute).info["left"] is False
    assert again.stage("fit_m", {}, [a], compute, resumable=True).info["left"] is True
    assert [r["status"] for r in again.records] == ["cached", "ran", "resumed"]
    assert again.current == "fit_m"
    assert any("clearing what an interrupted run left" in line for line in lines)
    assert any("resuming the unfinished run" in line for line in lines)


def test_a_run_folder_takes_one_run_at_a_time(tmp_path):
    with exclusive(tmp_path):
        with pytest.raises(UserError, match="is in use by another pipeline run"):
            with exclusive(tmp_path):
                pass
    with exclusive(tmp_path):  # free again
        pass


def test_rerun_of_an_unchanged_job_reuses_every_stage_and_same_bytes(first):
    config, _ = first
    run_dir = config.parent / "run"
    before = {name: (run_dir / name).read_bytes() for name in OUTPUTS}
    again = run(config)
    assert again["ran"] == [] and again["cached"] == ALL_STAGES
    assert {name: (run_dir / name).read_bytes() for name in OUTPUTS} == before
    assert (run_dir / "pipeline.log").read_text().count("pipeline run") == 2


def test_changing_a_dnntsp_setting_reruns_only_training_onwards(first, log, tmp_path):
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    changed = write_job(tmp_path, log[0], models={"dnntsp": {**DNNTSP, "lr": 0.005}})
    summary = run(changed)
    assert status(summary) == {
        "prepare": "cached",
        "split": "cached",
        "fit_dnntsp": "ran",
        "evaluate": "ran",
        "recommend": "ran",
        "report": "ran",
    }
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["models"][1]["params"]["lr"] == 0.005


def test_changing_only_where_training_runs_reruns_nothing(first, log, tmp_path):
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    summary = run(write_job(tmp_path, log[0], models={"dnntsp": {**DNNTSP, "threads": 2}}))
    assert summary["ran"] == []


def test_killed_mid_training_then_rerun_ends_as_an_uninterrupted_run(
    first, log, tmp_path, monkeypatch
):
    config_a, _ = first
    config_b = write_job(tmp_path, log[0])
    calls = {"n": 0}
    real = trainer.validation_metrics

    def killed_in_epoch_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "validation_metrics", killed_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        run(config_b)
    monkeypatch.undo()
    run_b = tmp_path / "run"
    (fit_dir,) = (run_b / "stages").glob("fit_dnntsp-*")
    assert (fit_dir / "resume.pt").is_file() and not (fit_dir / "_done.json").exists()
    assert not (run_b / "recommendations.parquet").exists()
    assert "interrupted in stage fit_dnntsp" in (run_b / "pipeline.log").read_text()

    summary = run(config_b)
    assert status(summary)["fit_dnntsp"] == "resumed"
    assert status(summary)["prepare"] == status(summary)["split"] == "cached"
    epochs = [
        json.loads(line)["epoch"] for line in (fit_dir / "train_log.jsonl").read_text().splitlines()
    ]
    assert epochs == [1, 2, 3, 4]
    run_a = config_a.parent / "run"
    for name in ("recommendations.parquet", "recommendations.csv"):
        assert (run_b / name).read_bytes() == (run_a / name).read_bytes(), name
    metrics_a = json.loads((run_a / "metrics.json").read_text())
    metrics_b = json.loads((run_b / "metrics.json").read_text())
    assert without_timings(metrics_b) == without_timings(metrics_a)


def test_a_log_rewritten_with_the_same_content_reruns_only_prepare(log, tmp_path):
    log_path = tmp_path / "log.csv"
    shutil.copy(log[0], log_path)
    config = write_job(tmp_path, log_path, **copy.deepcopy(BASELINES_ONLY))
    run(config)
    os.utime(log_path, ns=(0, 0))
    summary = run(config)
    assert summary["ran"] == ["prepare"]
    assert summary["cached"] == ["split", "evaluate", "recommend", "report"]


def test_a_crash_while_publishing_keeps_the_previous_outputs_and_a_rerun_publishes_all(
    first, log, tmp_path, monkeypatch
):
    run_dir = copy_of_run(first, tmp_path)
    before = {name: (run_dir / name).read_bytes() for name in OUTPUTS}
    changed = write_job(tmp_path, log[0], recommend={"k": K - 2})
    # Staging report.html fails: it is published after the recommendations and metrics.json.
    monkeypatch.setattr(
        io_utils,
        "_link_or_copy",
        raising_for("report.html", io_utils._link_or_copy, OSError("disk full")),
    )
    with pytest.raises(OSError, match="disk full"):
        run(changed)
    monkeypatch.undo()
    assert {name: (run_dir / name).read_bytes() for name in OUTPUTS} == before
    assert sorted(p.name for p in run_dir.glob("report_*.png")) == sorted(
        f for f in OUTPUTS if f.startswith("report_")
    )

    summary = run(changed)
    assert set(status(summary).values()) == {"cached"}  # the crashed run finished every stage
    stage_dirs = {s["name"]: Path(s["dir"]) for s in summary["stages"]}
    for name in OUTPUTS:
        made_by = "recommend" if name.startswith("recommendations") else "report"
        assert (run_dir / name).read_bytes() == (stage_dirs[made_by] / name).read_bytes(), name
    recs = pd.read_parquet(run_dir / "recommendations.parquet")
    assert recs["rank"].max() == K - 2
    assert json.loads((run_dir / "metrics.json").read_text())["recommendations"]["k"] == K - 2
    assert (run_dir / "recommendations.parquet").read_bytes() != before["recommendations.parquet"]
    assert not (run_dir / ".publishing").exists()


def test_a_run_starts_by_completing_outputs_a_crash_left_half_moved(
    first, log, tmp_path, monkeypatch
):
    run_dir = copy_of_run(first, tmp_path)
    changed = write_job(tmp_path, log[0], report={"title": "Renamed report"})
    # Killed between moving the staged metrics.json and report.html into place.
    monkeypatch.setattr(os, "replace", raising_for("report.html", os.replace, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run(changed)
    monkeypatch.undo()
    assert "Renamed report" in (run_dir / "metrics.json").read_text()
    assert "Renamed report" not in (run_dir / "report.html").read_text()

    out = io.StringIO()
    summary = run(changed, out)
    assert "moved into place the rest of the outputs an interrupted run had staged" in out.getvalue()
    assert summary["ran"] == []
    assert "Renamed report" in (run_dir / "report.html").read_text()
