"""The YAML pipeline: outputs with the right rows, stage caching, exact resume after a kill
mid-training, bad-row handling, the report, and errors naming the key."""

from __future__ import annotations

import copy
import html
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from rich.console import Console

import basketgnn.engine.trainer as trainer
from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from basketgnn.pipeline.run import run_pipeline

K = 5
DNNTSP = {"epochs": 4, "embed_dim": 8, "threads": 1, "lr": 0.01}
ALL_STAGES = ["prepare", "split", "fit_dnntsp", "evaluate", "recommend", "report"]
OUTPUTS = [
    "recommendations.parquet",
    "recommendations.csv",
    "metrics.json",
    "report.html",
    "report_training.png",
    "report_metrics_at_k.png",
    "report_repeat_explore.png",
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module", autouse=True)
def _restore_torch_threads():
    """The jobs train with threads: 1, which torch keeps process-wide."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    # 50 items: DNNTSP's validation ranks a top 40 (basketgnn.metrics.KS).
    df = generate_log(n_customers=150, n_items=50, mean_baskets=6, seed=0)
    path = tmp_path_factory.mktemp("log") / "log.csv"
    write_log(df, path)
    return path, df


def write_job(folder: Path, log_path: Path, **sections: dict[str, Any]) -> Path:
    """A pipeline file in ``folder`` (run_dir ``folder/run``, paths relative to the file)."""
    cfg: dict[str, Any] = {
        "run_dir": "run",
        "input": {"path": os.path.relpath(log_path, folder)},
        "models": {"baselines": ["p-topfreq"], "dnntsp": dict(DNNTSP)},
        "recommend": {"k": K},
        "report": {"title": "Pipeline test"},
    }
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values} if isinstance(values, dict) else values
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(config: Path, console_out: io.StringIO | None = None) -> dict[str, Any]:
    console = Console(file=console_out or io.StringIO(), width=200)
    return run_pipeline(config, progress=False, console=console)


def status(summary: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in summary["stages"]}


def without_timings(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: without_timings(v) for k, v in obj.items() if k not in ("timing_s", "train_seconds")
        }
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


@pytest.fixture(scope="module")
def first(log, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """Run A: the test job, uninterrupted."""
    config = write_job(tmp_path_factory.mktemp("a"), log[0])
    return config, run(config)


def test_outputs_hold_top_k_for_every_customer_in_original_ids(first, log):
    config, summary = first
    _, df = log
    run_dir = config.parent / "run"
    assert summary["ran"] == ALL_STAGES and summary["cached"] == []
    for name in OUTPUTS + ["pipeline.log"]:
        assert (run_dir / name).is_file(), name

    recs = pd.read_parquet(run_dir / "recommendations.parquet")
    assert list(recs.columns) == ["customer_id", "item_id", "rank", "score"]
    baskets = df.groupby("customer_id")["basket_id"].nunique()
    assert set(recs["customer_id"]) == set(baskets.index[baskets >= 2])
    ranks = recs.groupby("customer_id", sort=False)["rank"].apply(list)
    assert all(r == list(range(1, K + 1)) for r in ranks) and len(recs) == K * len(ranks)
    assert set(recs["item_id"]) <= set(df["item_id"])
    assert not recs.duplicated(["customer_id", "item_id"]).any()
    csv = pd.read_csv(run_dir / "recommendations.csv", dtype={"customer_id": str, "item_id": str})
    pd.testing.assert_frame_equal(csv, recs, check_dtype=False, atol=1e-6)

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [r["model"] for r in metrics["models"]] == ["p-topfreq", "dnntsp"]
    assert metrics["split"]["name"].startswith("temporal")
    assert metrics["evaluated_on"]["customers"] == len(baskets)
    for r in metrics["models"]:
        assert r["split"] == metrics["split"]["name"] and r["n_users"] == len(baskets)
        assert {"recall@10", "ndcg@20", "phr@40", "repeat_recall@10", "explore_recall@20"} <= set(
            r["metrics"]
        )
        assert {"fit", "score"} <= set(r["timing_s"])
    assert set(metrics["timing_s"]) == set(ALL_STAGES) - {"report"}
    assert metrics["dnntsp_training"]["epochs_run"] == DNNTSP["epochs"]
    assert metrics["recommendations"] == {
        "model": "dnntsp",
        "k": K,
        "customers": len(baskets),
        "rows": len(recs),
        "files": ["recommendations.parquet", "recommendations.csv"],
    }
    assert "pipeline run" in (run_dir / "pipeline.log").read_text()


def test_report_references_valid_pngs_next_to_it(first):
    config, _ = first
    run_dir = config.parent / "run"
    page = (run_dir / "report.html").read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert sorted(images) == sorted(f for f in OUTPUTS if f.endswith(".png"))
    for name in images:
        assert (run_dir / name).read_bytes().startswith(PNG_SIGNATURE), name
    assert "<table>" in page and "<b>" in page and "temporal" in page
    assert "http" not in page  # self-contained: no external assets


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


def test_what_the_models_history_cap_left_out_is_shown_everywhere(first, log, tmp_path):
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    changed = write_job(tmp_path, log[0], models={"dnntsp": {**DNNTSP, "train_history_items": 8}})
    out = io.StringIO()
    run(changed, out)
    run_dir = tmp_path / "run"
    left_out = json.loads((run_dir / "metrics.json").read_text())["dnntsp_training"]["left_out_baskets"]
    line = "left out " + ", ".join(f"{n:,} {part} history baskets" for part, n in left_out.items())
    page = html.unescape((run_dir / "report.html").read_text())
    for text in (out.getvalue(), (run_dir / "pipeline.log").read_text(), page):
        assert line in " ".join(text.split()), text
    # The default job (item cap 150, not reached on this log) leaves out fewer training
    # baskets, and the same validation ones: the item cap bounds training only.
    before = json.loads((config.parent / "run" / "metrics.json").read_text())["dnntsp_training"]
    before = before.get("left_out_baskets", {})
    assert before.get("train", 0) < left_out["train"]
    assert before.get("validate", 0) == left_out.get("validate", 0)


def test_changing_only_where_training_runs_reruns_nothing(first, log, tmp_path):
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    summary = run(write_job(tmp_path, log[0], models={"dnntsp": {**DNNTSP, "threads": 2}}))
    assert summary["ran"] == []


def test_recommend_threads_score_with_two_threads_and_the_same_rows(first, log, tmp_path, monkeypatch):
    from basketgnn.recommenders.neural import NeuralRecommender

    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    before = pd.read_parquet(tmp_path / "run" / "recommendations.parquet")
    job = write_job(tmp_path, log[0], recommend={"k": K, "threads": 2})
    assert run(job)["ran"] == []  # scoring threads are not part of any stage's key
    used: list[int] = []
    original = NeuralRecommender.setup

    def setup(self, *args, **kwargs):
        used.append(self.config.threads)  # what ranking scores with (alone or fused)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NeuralRecommender, "setup", setup)
    for stage in (tmp_path / "run" / "stages").glob("recommend-*"):
        shutil.rmtree(stage)
    summary = run(job)
    assert status(summary)["recommend"] == "ran" and used and set(used) == {2}  # the model says 1
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "run" / "recommendations.parquet"), before)


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


@pytest.fixture(scope="module")
def bad_log(log, tmp_path_factory) -> Path:
    df = log[1].astype({"timestamp": str})
    df.loc[4, "timestamp"] = "not a date"  # data row 5 of the file
    path = tmp_path_factory.mktemp("bad") / "bad.csv"
    write_log(df, path)
    return path


BASELINES_ONLY = {
    "models": {"baselines": ["p-topfreq"], "dnntsp": None},
    "recommend": {"model": "p-topfreq"},
}


def test_a_bad_row_stops_the_job_by_default_naming_file_row_and_value(bad_log, tmp_path):
    config = write_job(tmp_path, bad_log, **copy.deepcopy(BASELINES_ONLY))
    with pytest.raises(
        UserError, match=r"bad\.csv row 5 \(timestamp='not a date'\).*on_bad_rows: skip"
    ):
        run(config)
    assert not (tmp_path / "run" / "recommendations.parquet").exists()
    assert "bad.csv row 5" in (tmp_path / "run" / "pipeline.log").read_text()


def test_skipped_bad_rows_are_counted_and_shown_everywhere(bad_log, tmp_path):
    sections = copy.deepcopy(BASELINES_ONLY)
    config = write_job(
        tmp_path, bad_log, input={"path": bad_log.name, "on_bad_rows": "skip"}, **sections
    )
    shutil.copy(bad_log, tmp_path / bad_log.name)
    out = io.StringIO()
    summary = run(config, out)
    run_dir = tmp_path / "run"
    assert summary["ran"] == [s for s in ALL_STAGES if s != "fit_dnntsp"]
    report = json.loads((run_dir / "metrics.json").read_text())["data"]["report"]
    assert report["rows_skipped"] == 1 and "row 5" in report["skipped_because"][0]
    assert "skipped 1 bad row(s)" in out.getvalue()
    assert "skipped 1 bad row(s)" in (run_dir / "pipeline.log").read_text()
    assert "1 bad row(s) skipped" in (run_dir / "report.html").read_text()
    assert not (run_dir / "report_training.png").exists()


def test_where_returns_and_caps_are_counted_and_shown_everywhere(log, tmp_path):
    df = log[1].assign(quantity=1)
    df.loc[df.index % 10 == 0, "quantity"] = -1  # every 10th row a return
    path = tmp_path / "export.csv"
    write_log(df, path)
    where = "item_id <> 'I0001'"
    config = write_job(
        tmp_path, path,
        input={"path": path.name, "columns": {"quantity": "quantity"}, "where": where,
               "max_basket_items": 2, "last_n": 4},
        **copy.deepcopy(BASELINES_ONLY),
    )  # fmt: skip
    out = io.StringIO()
    run(config, out)
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "metrics.json").read_text())["data"]["report"]
    n_where = int((df["item_id"] == "I0001").sum())
    n_returns = int(((df["quantity"] <= 0) & (df["item_id"] != "I0001")).sum())
    assert (report["rows_dropped_where"], report["returns_excluded"]) == (n_where, n_returns)
    assert report["baskets_capped"] > 0 and report["baskets_dropped_last_n"] > 0
    lines = [
        f"rows dropped by where: {n_where:,} of {len(df):,} read",
        f"returns excluded (quantity <= 0): {n_returns:,} rows",
        f"basket cap: {report['baskets_capped']:,} baskets capped",
        f"last-N cap: {report['baskets_dropped_last_n']:,} older baskets dropped",
    ]
    page = html.unescape((run_dir / "report.html").read_text())
    for text in (out.getvalue(), (run_dir / "pipeline.log").read_text(), page):
        assert all(line in text for line in lines), text


def test_a_bad_where_stops_the_job_naming_the_key(log, tmp_path):
    config = write_job(tmp_path, log[0], input={"where": "item_id = "})
    with pytest.raises(UserError, match=r"input\.where 'item_id = ' is not usable: Parser Error"):
        run_pipeline(config)
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_log_rewritten_with_the_same_content_reruns_only_prepare(log, tmp_path):
    log_path = tmp_path / "log.csv"
    shutil.copy(log[0], log_path)
    config = write_job(tmp_path, log_path, **copy.deepcopy(BASELINES_ONLY))
    run(config)
    os.utime(log_path, ns=(0, 0))
    summary = run(config)
    assert summary["ran"] == ["prepare"]
    assert summary["cached"] == ["split", "evaluate", "recommend", "report"]


def test_a_catalogue_smaller_than_the_largest_k_is_evaluated_at_the_ks_it_has(tmp_path):
    log_path = tmp_path / "small.csv"
    write_log(generate_log(n_customers=150, n_items=30, mean_baskets=6, seed=0), log_path)
    config = write_job(tmp_path, log_path, **copy.deepcopy(BASELINES_ONLY))
    run(config)
    (record,) = json.loads((tmp_path / "run" / "metrics.json").read_text())["models"]
    assert {k.split("@")[1] for k in record["metrics"]} == {"10", "20", "30"}


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"input": {"engin": "pandas"}},
            r"job\.yaml: input\.engin: unknown key \(valid: path, columns, engine",
        ),
        ({"input": {"columns": {"cust": "c"}}}, r"input\.columns\.cust: unknown key \(valid: customer, "),
        ({"recommend": {"k": 0}}, r"recommend\.k: Input should be greater than or equal to 1 \(got 0\)"),
        (
            {"models": {"baselines": [3]}},
            r"models\.baselines\[0\]: Input should be a valid string \(got 3\); "
            r"models\.baselines\[0\]: Input should be a valid dictionary",
        ),
        ({"input": {"engine": "pandas"}}, r"input\.engine: .*'duckdb'"),
        ({"split": {"kind": "weekly"}}, r"split\.kind"),
        ({"models": {"dnntsp": {"lr": -1}}}, r"models\.dnntsp: .*lr"),
        ({"models": {"baselines": ["most-popular"]}}, r"models\.baselines\[0\]: Unknown baseline"),
        ({"models": {"dnntps": {}}}, r"models\.dnntps: unknown trainable model 'dnntps'; choose one of dnntsp"),
        ({"recommend": {"model": "tifu-knn"}}, r"recommend\.model is 'tifu-knn'"),
    ],
)
def test_a_bad_pipeline_file_is_an_error_naming_the_key(log, tmp_path, sections, message):
    config = write_job(tmp_path, log[0], **sections)
    with pytest.raises(UserError, match=message):
        run_pipeline(config)
    assert not (tmp_path / "run").exists()


def copy_of_run(first: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    """A copy of run A's run folder in ``tmp_path`` (a job written there uses it)."""
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    return tmp_path / "run"


def raising_for(name: str, real: Callable[..., Any], error: BaseException) -> Callable[..., Any]:
    """``real``, except that it raises ``error`` when its first argument is a file ``name``."""

    def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name == name:
            raise error
        return real(path, *args, **kwargs)

    return wrapper


def test_a_crash_while_publishing_keeps_the_previous_outputs_and_a_rerun_publishes_all(
    first, log, tmp_path, monkeypatch
):
    run_dir = copy_of_run(first, tmp_path)
    before = {name: (run_dir / name).read_bytes() for name in OUTPUTS}
    changed = write_job(tmp_path, log[0], recommend={"k": K - 2})
    # Staging report.html fails: it is published after the recommendations and metrics.json.
    monkeypatch.setattr(
        shutil, "copyfile", raising_for("report.html", shutil.copyfile, OSError("disk full"))
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


def test_recommend_model_auto_uses_the_best_on_validation_and_says_why(log, tmp_path):
    config = write_job(
        tmp_path, log[0],
        models={"baselines": ["g-topfreq", "p-topfreq"], "dnntsp": None},
        recommend={"model": "auto"},
    )
    out = io.StringIO()
    run(config, out)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    crit = {r["model"]: r["validation"]["criterion"] for r in metrics["models"]}
    for r in metrics["models"]:  # the mean of recall, NDCG and PHR at 10 and 20 on validation
        assert r["validation"]["criterion"] == pytest.approx(np.mean(list(r["validation"]["metrics"].values())))
        assert len(r["validation"]["metrics"]) == 6
    best = max(crit, key=crit.get)
    assert crit["g-topfreq"] != crit["p-topfreq"]
    chosen = metrics["recommendations"]
    assert chosen["model"] == best and chosen["selection"]["validation_criterion"] == crit
    assert f"recommend.model auto: {best}, best validation" in out.getvalue()
    assert "recommend.model auto" in (tmp_path / "run" / "pipeline.log").read_text()
    recs = pd.read_parquet(tmp_path / "run" / "recommendations.parquet")
    assert len(recs) > 0


def test_evaluation_on_a_seeded_sample_of_test_customers_while_everyone_is_recommended(log, tmp_path):
    from basketgnn.data.dataset import BasketData
    from basketgnn.data.split import make_split
    from basketgnn.pipeline.run import evaluation_split
    from basketgnn.pipeline.schema import EvaluateSpec

    config = write_job(tmp_path / "s", log[0], **copy.deepcopy(BASELINES_ONLY), evaluate={"customers": 40})
    summary = run(config)
    metrics = json.loads(summary["outputs"]["metrics"].read_text())
    assert metrics["evaluated_on"]["customers"] == 40
    assert all(m["n_users"] == 40 for m in metrics["models"])
    recs = pd.read_parquet(summary["outputs"]["recommendations_parquet"])
    assert recs["customer_id"].nunique() == log[1]["customer_id"].nunique()  # everyone
    # The sample: seeded, in order, a subset of the test part; the whole part when small.
    data = BasketData.load(next((tmp_path / "s" / "run" / "stages").glob("prepare-*")) / "data")
    sp = make_split(data, "temporal")
    a, b = (evaluation_split(sp, EvaluateSpec(customers=40, seed=3)) for _ in range(2))
    np.testing.assert_array_equal(a["test"].users, b["test"].users)
    assert len(a["test"]) == 40 and np.all(np.diff(a["test"].users) > 0)
    assert set(a["test"].users) <= set(sp["test"].users)
    assert a["train"] is sp["train"] and a["validate"] is sp["validate"]
    other = evaluation_split(sp, EvaluateSpec(customers=40, seed=4))
    assert not np.array_equal(other["test"].users, a["test"].users)
    assert evaluation_split(sp, EvaluateSpec(customers=10_000)) is sp
    # Held out: only customers outside the training sample, then the sample of them.
    trained_on = np.zeros(data.n_users, dtype=bool)
    trained_on[::2] = True
    held = evaluation_split(sp, EvaluateSpec(customers=30, held_out=True), trained_on)
    assert len(held["test"]) == 30 and not trained_on[held["test"].users].any()
    everyone = np.ones(data.n_users, dtype=bool)
    with pytest.raises(UserError, match="every customer is in the training sample"):
        evaluation_split(sp, EvaluateSpec(held_out=True), everyone)
    with pytest.raises(UserError, match="evaluate.held_out needs train.sample_customers"):
        run(write_job(tmp_path / "h", log[0], **copy.deepcopy(BASELINES_ONLY), evaluate={"held_out": True}))
    # The sample is part of the evaluate stage's hash: the plain job does not reuse its folder.
    plain = run(write_job(tmp_path / "p", log[0], **copy.deepcopy(BASELINES_ONLY)))
    names = {Path(s["dir"]).name for s in plain["stages"]} & {Path(s["dir"]).name for s in summary["stages"]}
    assert not any(n.startswith("evaluate-") for n in names)
