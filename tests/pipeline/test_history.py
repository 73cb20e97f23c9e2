"""The run history (basketgnn.pipeline.history): runs.jsonl, train.warm_start: previous found
there, idempotent reruns of a night, and keep_runs pruning the stage folders."""

from __future__ import annotations

import json
from pathlib import Path

from basketgnn.pipeline.cache import DONE_FILE
from basketgnn.pipeline.history import RUNS_FILE, previous_checkpoint, prune_stages, successful_runs
from tests.support.pipeline import status


def test_night_two_warm_starts_from_night_one_with_items_mapped(nights):
    night1_ckpt = json.loads((nights["run_dir"] / RUNS_FILE).read_text().splitlines()[0])["checkpoints"]["dnntsp"]
    warm = nights["night2_metrics"]["nightly"]["warm_start"]["dnntsp"]
    assert warm["checkpoint"] == night1_ckpt and Path(night1_ckpt).is_file()
    assert (warm["items_new"], warm["items_dropped"], warm["items_kept"]) == (1, 1, 49)
    assert "embedding.weight" in warm["item_entries"]
    assert status(nights["night2"])["fit_dnntsp"] == "ran"
    html = nights["night2_html"]
    assert "sample of <b>80 of 151 customers</b> (seed 1" in html
    assert f"warm-started from <code>{night1_ckpt}</code>" in html
    assert "<b>49 items kept, 1 new</b>" in html and "<b>1 dropped</b>" in html


def test_reruns_of_an_unchanged_night_reuse_every_stage(nights):
    for rerun in ("rerun1", "rerun2"):
        assert set(status(nights[rerun]).values()) == {"cached"}, status(nights[rerun])
    # One line per successful run, the checkpoint of each.
    records = [json.loads(line) for line in (nights["run_dir"] / RUNS_FILE).read_text().splitlines()]
    assert len(records) == 4 and records[0]["data"] == records[1]["data"] != records[2]["data"]


def test_keep_runs_deletes_the_stage_folders_no_kept_run_uses(nights):
    """keep_runs: 1 — after night 2 only its stages stay, and night 1's fit stage it started
    from (a rerun of night 2 warm-starts from it again, so it must stay)."""
    records = successful_runs(nights["run_dir"])
    night1_fit = Path(records[0]["checkpoints"]["dnntsp"]).parent.name
    left = {p.name for p in (nights["run_dir"] / "stages").iterdir()}
    assert left == set(records[-1]["stages"]) | {night1_fit}
    assert set(records[0]["stages"]) & left == {night1_fit}  # night 1's other stages are gone
    assert records[-1]["warm_start"] == {"dnntsp": records[0]["checkpoints"]["dnntsp"]}


def _write_runs(run_dir: Path, records: list[dict], tail: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUNS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_a_line_cut_short_by_a_crash_is_no_run(tmp_path):
    assert successful_runs(tmp_path) == []
    _write_runs(tmp_path, [{"data": "a"}], tail='{"data": "b", "check')
    assert successful_runs(tmp_path) == [{"data": "a"}]


def test_previous_is_the_last_existing_checkpoint_of_a_run_on_other_data(tmp_path):
    old, new = tmp_path / "old.pt", tmp_path / "new.pt"
    old.write_bytes(b"")
    _write_runs(tmp_path, [
        {"data": "d1", "checkpoints": {"m": str(old)}},
        {"data": "d2", "checkpoints": {"m": str(new)}},  # its file is gone
        {"data": "d3", "checkpoints": {}},
    ])  # fmt: skip
    assert previous_checkpoint(tmp_path, "m", "d4") == old
    assert previous_checkpoint(tmp_path, "m", "d1") is None  # the same data: not "previous"
    assert previous_checkpoint(tmp_path, "other", "d4") is None


def test_pruning_keeps_unfinished_folders_and_deletes_nothing_without_stage_lists(tmp_path):
    stages = tmp_path / "stages"
    for name, done in (("a-1", True), ("b-1", True), ("c-1", True), ("fit_m-1", False)):
        (stages / name).mkdir(parents=True)
        if done:
            (stages / name / DONE_FILE).write_text("{}")
    _write_runs(tmp_path, [{"data": "d1"}])
    assert prune_stages(tmp_path, 1) == []  # what that run used is unknown
    _write_runs(tmp_path, [{"data": "d1"}, {"stages": ["a-1"], "warm_start": {"m": str(stages / "b-1" / "best.pt")}}])
    assert prune_stages(tmp_path, 1) == ["c-1"]
    assert sorted(p.name for p in stages.iterdir()) == ["a-1", "b-1", "fit_m-1"]
