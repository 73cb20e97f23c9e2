"""A pipeline run (basketgnn.pipeline.run): outputs with the right rows, what each stage shows
on the console, in pipeline.log and the report (bad rows, where / returns / caps, the history
cap), recommend.model auto, evaluation on a sample of customers, and a nightly job's training
sample."""

from __future__ import annotations

import copy
import html
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from basketgnn.pipeline.history import RUNS_FILE
from basketgnn.recommenders.reranked import RerankedRecommender
from basketgnn.workflow.training import load_trained
from tests.support.pipeline import (
    ALL_STAGES,
    BASELINES_ONLY,
    DNNTSP,
    NIGHTLY_DNNTSP,
    OUTPUTS,
    K,
    run,
    status,
    write_job,
)


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
    text = (run_dir / "pipeline.log").read_text()
    assert "pipeline run" in text and "fusion with TIFU-KNN" in text  # what validation chose is said


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


def test_recommend_reasons_adds_the_column_and_reruns_only_recommend(first, log, tmp_path):
    config, _ = first
    shutil.copytree(config.parent / "run", tmp_path / "run")
    before = pd.read_parquet(tmp_path / "run" / "recommendations.parquet")
    job = write_job(tmp_path, log[0], recommend={"k": K, "reasons": True})
    summary = run(job)
    assert status(summary)["recommend"] == "ran" and "ran" not in {status(summary)[s] for s in ("prepare", "split")}
    after = pd.read_parquet(tmp_path / "run" / "recommendations.parquet")
    pd.testing.assert_frame_equal(after.drop(columns="reasons"), before)
    first_reasons = json.loads(after["reasons"].iloc[0])
    ckpt = json.loads((tmp_path / "run" / RUNS_FILE).read_text().splitlines()[0])["checkpoints"]["dnntsp"]
    if isinstance(load_trained(Path(ckpt)), RerankedRecommender):  # the stage's score orders the rows
        assert [r["kind"] for r in first_reasons[:2]] == ["rerank", "score"]
    else:
        assert first_reasons[0]["kind"] == "score" and np.isclose(first_reasons[0]["score"], after["score"].iloc[0], rtol=1e-6)
    assert "reasons" in pd.read_csv(tmp_path / "run" / "recommendations.csv", nrows=1).columns


@pytest.fixture(scope="module")
def bad_log(log, tmp_path_factory) -> Path:
    df = log[1].astype({"timestamp": str})
    df.loc[4, "timestamp"] = "not a date"  # data row 5 of the file
    path = tmp_path_factory.mktemp("bad") / "bad.csv"
    write_log(df, path)
    return path


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


def test_a_catalogue_smaller_than_the_largest_k_is_evaluated_at_the_ks_it_has(tmp_path):
    log_path = tmp_path / "small.csv"
    write_log(generate_log(n_customers=150, n_items=30, mean_baskets=6, seed=0), log_path)
    config = write_job(tmp_path, log_path, **copy.deepcopy(BASELINES_ONLY))
    run(config)
    (record,) = json.loads((tmp_path / "run" / "metrics.json").read_text())["models"]
    assert {k.split("@")[1] for k in record["metrics"]} == {"10", "20", "30"}


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
    # The sample is part of the evaluate stage's hash: the plain job does not reuse its folder.
    plain = run(write_job(tmp_path / "p", log[0], **copy.deepcopy(BASELINES_ONLY)))
    names = {Path(s["dir"]).name for s in plain["stages"]} & {Path(s["dir"]).name for s in summary["stages"]}
    assert not any(n.startswith("evaluate-") for n in names)


def test_the_sample_trains_and_everyone_is_scored(nights):
    nightly = nights["night1_metrics"]["nightly"]
    assert (nightly["sample"]["sampled"], nightly["sample"]["customers"], nightly["sample"]["seed"]) == (80, 150, 1)
    assert nightly["sample"]["validate"] <= 80 < nightly["sample"]["validate_before"]
    assert "warm_start" not in nightly  # night 1: nothing before it
    # Evaluated on every test customer, recommended to every customer.
    m = nights["night1_metrics"]
    assert m["evaluated_on"]["customers"] > 80 and m["recommendations"]["customers"] == 150
    assert nights["night2_recs"]["customer_id"].nunique() == nights["night2_log"]["customer_id"].nunique()


def test_a_warm_start_of_another_architecture_stops_the_job_naming_the_option(nights, tmp_path):
    ckpt = json.loads((nights["run_dir"] / RUNS_FILE).read_text().splitlines()[0])["checkpoints"]["dnntsp"]
    log = Path(nights["job"]).parent / "log.csv"
    job = write_job(tmp_path, log, train={"warm_start": ckpt},
                    models={"baselines": [], "dnntsp": {**NIGHTLY_DNNTSP, "embed_dim": 4}})
    with pytest.raises(UserError, match="embed_dim 8 there, 4 here"):
        run(job)
