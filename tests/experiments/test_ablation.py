"""The ablation grid: one JSON line per run, skip-on-rerun, crash safety, table and chart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import PrepareOptions, prepare_log
from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from basketgnn.experiments.ablation import (
    METRIC_NAMES,
    ablate,
    dataset_hash,
    describe_event,
    load_spec,
    read_results,
    run_grid,
    write_chart,
    write_table,
)
from basketgnn.recommenders.neural import NeuralRecommender

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
TABLE_METRICS = ["recall@10", "ndcg@10", "phr@10", "recall@20"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    # 40 items: training validates NDCG@40 and evaluation reports @40, so fewer items fail.
    write_log(generate_log(n_customers=120, n_items=40, mean_baskets=6, seed=0), folder / "log.csv")
    prepare_log(folder / "log.csv").save(folder / "ds")
    return folder / "ds"


def write_spec(folder: Path, dataset: Path, **changes) -> Path:
    spec = {
        "out": "out",  # relative: resolved against the spec's folder
        "datasets": {"synth": str(dataset)},
        "seeds": [0, 1],
        "base": {"epochs": 2, "embed_dim": 8, "threads": 1},
        "variants": {"full": {}, "no-gcn": {"gcn": False}},
        "baselines": ["p-topfreq"],
        "metrics_in_table": TABLE_METRICS,
    }
    spec.update(changes)
    path = folder / "ablation.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def fit_counter(monkeypatch) -> list[int]:
    """Counts DNNTSP trainings (seed of each), still training for real."""
    seeds: list[int] = []
    real_fit = NeuralRecommender.fit

    def counting_fit(self, *args, **kwargs):
        seeds.append(self.config.seed)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(NeuralRecommender, "fit", counting_fit)
    return seeds


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def bold_cells_per_column(table: str, dataset: str) -> list[int]:
    section = table.split(f"## {dataset}\n", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "---" not in r][1:]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    return [sum(c[j].startswith("**") for c in cells) for j in range(2, len(cells[0]))]


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


def test_results_written_before_data_hash_are_redone(tmp_path, dataset):
    spec = write_spec(tmp_path, dataset, variants={}, baselines=["g-topfreq"])
    run_grid(spec)
    results = tmp_path / "out" / "results.jsonl"
    (old,) = lines(results)
    del old["data_hash"]
    results.write_text(json.dumps(old) + "\n")
    events = []
    run_grid(spec, progress=events.append)
    assert [e.status for e in events] == ["start", "done"]
    assert lines(results)[1]["data_hash"] == dataset_hash(dataset)


def test_dataset_hash_is_the_content_of_a_file_or_of_a_folders_arrays(tmp_path, dataset):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"train": {"u": [[1], [2]]}, "validate": {}, "test": {}}')
    b.write_bytes(a.read_bytes())
    assert dataset_hash(a) == dataset_hash(b)
    b.write_text(a.read_text().replace("[2]", "[3]"))
    assert dataset_hash(a) != dataset_hash(b)
    # a folder: its arrays, whatever meta.json says about where they came from
    copy = tmp_path / "copy"
    data = BasketData.load(dataset)
    data.meta["source"] = "elsewhere.csv"
    data.save(copy)
    assert dataset_hash(copy) == dataset_hash(dataset)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty is not a readable prepared dataset folder"):
        dataset_hash(tmp_path / "empty")


def test_truncated_last_line_is_ignored_and_its_run_redone(tmp_path, dataset, fit_counter):
    spec = write_spec(tmp_path, dataset, seeds=[0], variants={"full": {}}, baselines=[])
    run_grid(spec)
    results = tmp_path / "out" / "results.jsonl"
    complete = results.read_text()
    # A crash mid-write leaves part of a second line without its newline.
    results.write_text(complete + complete[: len(complete) // 2])
    assert read_results(results) == [json.loads(complete)]

    write_spec(tmp_path, dataset, seeds=[0, 1], variants={"full": {}}, baselines=[])
    run_grid(spec)
    rows = lines(results)  # every line parses: the partial one was cut off, not glued to
    assert [r["seed"] for r in rows] == [0, 1] and fit_counter == [0, 1]


def test_corrupt_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"dataset": "a"\n{}\n')
    with pytest.raises(UserError, match="line 1 is not a result record"):
        read_results(path)


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


def fake_record(dataset: str, variant: str, seed: int | None, recall: float, ndcg: float) -> dict:
    return {
        "dataset": dataset, "variant": variant, "seed": seed, "config_hash": variant,
        "kind": "baseline" if seed is None else "dnntsp", "split": "predefined",
        "metrics": {"recall@10": recall, "ndcg@10": ndcg, "phr@10": None},
    }  # fmt: skip


def test_table_marks_one_best_cell_per_column_and_omits_std_of_single_runs(tmp_path):
    results = [
        fake_record("DC", "full", 0, 0.30, 0.20),
        fake_record("DC", "full", 1, 0.32, 0.22),
        fake_record("DC", "no-gcn", 0, 0.28, 0.25),
        fake_record("DC", "no-gcn", 1, 0.26, 0.27),
        fake_record("DC", "p-topfreq", None, 0.29, 0.10),
        fake_record("TaFeng", "full", 0, 0.10, 0.05),
        fake_record("TaFeng", "p-topfreq", None, 0.12, 0.04),
    ]
    metrics = ["recall@10", "ndcg@10", "phr@10"]
    table = write_table(results, tmp_path / "t.md", metrics)
    assert (tmp_path / "t.md").read_text() == table
    assert "| full | 2 | **0.3100 ± 0.0141** | 0.2100 ± 0.0141 | – |" in table
    assert "| no-gcn | 2 | 0.2700 ± 0.0141 | **0.2600 ± 0.0141** | – |" in table
    assert "| p-topfreq | 1 | 0.2900 | 0.1000 | – |" in table
    assert bold_cells_per_column(table, "DC") == [1, 1, 0]  # phr@10 undefined everywhere
    assert bold_cells_per_column(table, "TaFeng") == [1, 1, 0]
    assert table.index("## DC") < table.index("## TaFeng")

    # Cells that print equal are equally best.
    tie = write_table(results + [fake_record("TaFeng", "no-gcn", 0, 0.12, 0.01)], tmp_path / "t.md")
    assert bold_cells_per_column(tie, "TaFeng")[0] == 2

    write_chart(results, tmp_path / "c.png", metrics)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_table_keeps_two_settings_of_one_name_apart(tmp_path):
    old = fake_record("DC", "full", 0, 0.1, 0.1) | {"config_hash": "aaaaaaaa"}
    new = fake_record("DC", "full", 0, 0.2, 0.2) | {"config_hash": "bbbbbbbb"}
    table = write_table([old, new], tmp_path / "t.md", ["recall@10"])
    assert (
        "| full [aaaaaa] | 1 | 0.1000 |" in table and "| full [bbbbbb] | 1 | **0.2000** |" in table
    )


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"epochs": 3}, r"ablation\.yaml: epochs: unknown key \(valid: out, datasets, model, seeds, "),
            ({"variants": {"x": {"model": "dnntps"}}}, "variant 'x': model: unknown trainable model 'dnntps'"),
            ({"model": "g-topfreq"}, "model: unknown trainable model 'g-topfreq'"),
        ({"seeds": ["a"]}, r"ablation\.yaml: seeds\[0\]: Input should be a valid integer.*\(got 'a'\)"),
        ({"datasets": {"DC": "missing/DC.json"}}, r"dataset 'DC': missing/DC\.json not found"),
        ({"variants": {"bad": {"gcn_depth": 2}}}, r"variant 'bad'.*gcn_depth"),
        ({"variants": {"no-gate": {"gate": False}}}, r"gate: False is a YAML boolean; quote"),
        ({"variants": {"full": {"seed": 3}}}, "'seed' is set per run by `seeds`"),
        ({"base": {"epochs": 2, "lr": -1}}, r"base: invalid config \(lr: "),
        ({"baselines": ["top-pop"]}, "unknown baseline 'top-pop'"),
        ({"metrics_in_table": ["recall@5"]}, r"unknown metric\(s\) \['recall@5'\]"),
        ({"seeds": [0, 0]}, "seeds repeat a value"),
    ],
)
def test_bad_spec_is_a_user_error_naming_the_problem(tmp_path, dataset, changes, match):
    with pytest.raises(UserError, match=match):
        load_spec(write_spec(tmp_path, dataset, **changes))


def test_unknown_dataset_selection_and_table_before_any_run_are_user_errors(tmp_path, dataset):
    spec = write_spec(tmp_path, dataset)
    with pytest.raises(UserError, match=r"Unknown dataset\(s\) \['DC'\]; the spec has synth"):
        run_grid(spec, only_datasets=["DC"])
    with pytest.raises(UserError, match="no results of this spec yet"):
        ablate(spec, table_only=True)


def test_the_shipped_spec_is_valid():
    spec = Path(__file__).resolve().parents[2] / "pipelines" / "ablation.yaml"
    raw = yaml.safe_load(spec.read_text())
    assert set(raw["variants"]) == {
        "full", "no-gcn", "no-attention", "last-timestamp", "no-gate", "no-repeat-features",
        "no-transitions", "no-fusion",
    }
    assert raw["variants"]["no-gate"] == {"gate": "off"}
    assert raw["variants"]["no-fusion"] == {"fusion": "off"}
    if all((spec.parent / p).exists() for p in raw["datasets"].values()):
        grid = load_spec(spec)
        assert len(grid.runs) == 2 * (3 + 8 * 3)
        assert grid.out == (spec.parent.parent / "docs" / "ablation").resolve()
