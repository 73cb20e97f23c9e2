"""The ablation grid (basketgnn/experiments/ablation.py): run_grid writes one JSON line per run
and skips finished runs, reruns the runs of changed data, and ablate writes table and chart."""

from __future__ import annotations

import re

import pytest

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import PrepareOptions, prepare_log
from basketgnn.errors import UserError
from basketgnn.experiments.ablation import ablate, describe_event, run_grid
from basketgnn.experiments.ablation_spec import METRIC_NAMES, dataset_hash
from tests.support.ablation import TABLE_METRICS, lines, write_spec

# The workflow's result record (ModelResult.to_json() and its training summary) + the grid's keys.
RESULT_KEYS = {
    "model", "params", "data", "split", "part", "n_users", "metrics", "timing_s",
    "best_epoch", "epochs_run", "fusion",
}  # fmt: skip
GRID_KEYS = {
    "dataset", "data_path", "data_hash", "variant", "kind", "seed", "config", "config_hash",
    "finished_at",
}  # fmt: skip
RECORD_KEYS = RESULT_KEYS | GRID_KEYS


def test_grid_writes_one_line_per_run_and_skips_finished_runs(tmp_path, dataset, fit_counter):
    spec = write_spec(tmp_path, dataset)
    events = []
    records = run_grid(spec, progress=events.append)

    results = tmp_path / "out" / "results.jsonl"
    rows = lines(results)
    assert len(rows) == 5 == len(records) and fit_counter == [0, 0, 1, 1]
    assert all(set(r) == RECORD_KEYS for r in rows)
    assert {(r["variant"], r["seed"]) for r in rows} == {
        ("p-topfreq", None), ("full", 0), ("full", 1), ("no-gcn", 0), ("no-gcn", 1),
    }  # fmt: skip
    for r in rows:
        assert set(r["metrics"]) == set(METRIC_NAMES)
        assert r["split"].startswith("temporal") and r["part"] == "test" and r["n_users"] > 0
        assert r["timing_s"]["fit"] >= 0 and r["timing_s"]["score"] >= 0
        assert r["data"] == str(dataset) and r["data_path"] == str(dataset)
        if r["kind"] == "dnntsp":
            assert r["model"] == "dnntsp" and r["params"]["gcn"] == r["config"]["gcn"]
            assert r["config"]["gcn"] == (r["variant"] == "full")
            assert r["config"]["seed"] == r["seed"] and r["config"]["epochs"] == 2
            assert 1 <= r["best_epoch"] <= r["epochs_run"] <= 2
            # the validation choice of the default fusion with TIFU-KNN
            assert set(r["fusion"]) == {"k", "weight"} and 0 <= r["fusion"]["weight"] <= 1
        else:
            assert r["model"] == r["variant"] == "p-topfreq" and r["config"] == {}
            assert r["best_epoch"] is None and r["epochs_run"] is None and r["fusion"] is None
    # One hash per setting: the seeds of a variant share it (the seed is its own key part).
    assert len({(r["variant"], r["config_hash"]) for r in rows}) == 3
    assert len({r["config_hash"] for r in rows}) == 3
    assert [e.status for e in events].count("done") == 5
    described = [describe_event(e) for e in events if e.status == "done"]
    assert described[0].startswith("synth  p-topfreq  seed -  recall@10 ")
    assert "best epoch" not in described[0]
    assert re.fullmatch(
        r"synth  full  seed 0  recall@10 \d\.\d{4}  ndcg@10 \d\.\d{4}  phr@10 \d\.\d{4}  "
        r"train \d+\.\ds \(best epoch [12]/[12]\)  test \d+\.\ds",
        described[1],
    )

    # Rerun: nothing trained, nothing appended, same records returned.
    events.clear()
    again = run_grid(spec, progress=events.append)
    assert fit_counter == [0, 0, 1, 1] and lines(results) == rows and again == records
    assert [e.status for e in events] == ["skipped"] * 5

    # A new variant: only its two runs are added.
    write_spec(tmp_path, dataset, variants={"full": {}, "no-gcn": {"gcn": False},
                                            "no-gate": {"gate": "off"}})  # fmt: skip
    run_grid(spec)
    rows = lines(results)
    assert len(rows) == 7 and fit_counter[4:] == [0, 1]
    assert [(r["variant"], r["seed"]) for r in rows[5:]] == [("no-gate", 0), ("no-gate", 1)]

    # threads only decide speed: changing them reruns nothing.
    write_spec(tmp_path, dataset, base={"epochs": 2, "embed_dim": 8, "threads": 2},
               variants={"full": {}})  # fmt: skip
    run_grid(spec)
    assert len(lines(results)) == 7


def test_changed_dataset_content_reruns_its_runs_and_unchanged_content_is_skipped(tmp_path, dataset):
    folder = tmp_path / "ds"
    BasketData.load(dataset).save(folder)
    spec = write_spec(tmp_path, folder, variants={}, baselines=["g-topfreq", "p-topfreq"])
    results = tmp_path / "out" / "results.jsonl"
    events = []
    run_grid(spec, progress=events.append)
    first = lines(results)
    assert [e.status for e in events] == ["start", "done"] * 2
    assert {r["data_hash"] for r in first} == {dataset_hash(folder)}
    assert all(r["dataset"] == "synth" and r["data_path"] == str(folder) for r in first)

    # The same data written again (new file dates, new zip entry dates): nothing is redone.
    BasketData.load(dataset).save(folder)
    events.clear()
    run_grid(spec, progress=events.append)
    assert [e.status for e in events] == ["skipped"] * 2 and lines(results) == first

    # Other data under the same name and path: the old lines are not current any more...
    prepare_log(dataset.parent / "log.csv", options=PrepareOptions(last_n=5)).save(folder)
    with pytest.raises(UserError, match="no results of this spec yet"):
        ablate(spec, table_only=True)
    # ...and running the grid again redoes every run of that dataset, keeping the old lines.
    events.clear()
    current = run_grid(spec, progress=events.append)
    assert [e.status for e in events] == ["start", "done"] * 2
    rows = lines(results)
    assert rows[:2] == first and len(rows) == 4
    assert {r["data_hash"] for r in rows[2:]} == {dataset_hash(folder)} != {first[0]["data_hash"]}
    assert current == rows[2:] and rows[2]["metrics"] != first[0]["metrics"]


def test_ablate_writes_table_and_chart_from_the_lines(tmp_path, dataset):
    spec = write_spec(tmp_path, dataset)
    outputs = ablate(spec)
    table = outputs.table.read_text()
    for name in ("full", "no-gcn", "p-topfreq"):
        assert re.search(rf"^\| {re.escape(name)} \| \d \|", table, re.M)
    assert "±" in table and "| variant | n | " + " | ".join(TABLE_METRICS) + " |" in table
    # The best cell of each column is bold; equal bests all are (two variants whose fusion
    # both chose TIFU-KNN alone rank identically).
    section = table.split("## synth\n", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "---" not in r][1:]
    cells = [[c.strip() for c in r.strip("|").split("|")][2:] for r in rows]
    for j in range(len(TABLE_METRICS)):
        means = [float(c[j].strip("*").split(" ")[0]) for c in cells]
        assert [c[j].startswith("**") for c in cells] == [m == max(means) for m in means]
    assert outputs.chart.read_bytes().startswith(b"\x89PNG")

    # --table-only: the same files again from results.jsonl, nothing trained.
    outputs.table.unlink()
    again = ablate(spec, table_only=True)
    assert again.table.read_text() == table and again.results == outputs.results


def test_unknown_dataset_selection_and_table_before_any_run_are_user_errors(tmp_path, dataset):
    spec = write_spec(tmp_path, dataset)
    with pytest.raises(UserError, match=r"Unknown dataset\(s\) \['DC'\]; the spec has synth"):
        run_grid(spec, only_datasets=["DC"])
    with pytest.raises(UserError, match="no results of this spec yet"):
        ablate(spec, table_only=True)
