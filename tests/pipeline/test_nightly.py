"""The nightly mode of the pipeline: train.sample_customers, train.warm_start (previous or a
path), runs.jsonl, the report's "sampled and reused" block, idempotent reruns, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_pipeline import run, status, write_job

from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from basketgnn.pipeline.history import RUNS_FILE, successful_runs
from basketgnn.pipeline.schema import load_job

NIGHTLY = {"warm_start": "previous", "sample_customers": 80, "sample_seed": 1}
DNNTSP = {"epochs": 1, "embed_dim": 8, "threads": 1, "lr": 0.01, "fusion": "off"}


@pytest.fixture(scope="module", autouse=True)
def _restore_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _night_two(df: pd.DataFrame) -> pd.DataFrame:
    """The next night's log: one item gone, one new item, one new customer."""
    gone = df["item_id"].value_counts().index[-1]
    df = df[df["item_id"] != gone].copy()
    first = df[df["customer_id"] == df["customer_id"].iloc[0]].copy()
    first["customer_id"] = "C-new"
    first["basket_id"] = "N" + first["basket_id"]
    first.loc[first.index[-1], "item_id"] = "I-new"
    return pd.concat([df, first], ignore_index=True)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Night 1 (from scratch: nothing before), its rerun, night 2 (warm), its rerun."""
    folder = tmp_path_factory.mktemp("nightly")
    df = generate_log(n_customers=150, n_items=50, mean_baskets=6, seed=0)
    log = folder / "log.csv"
    write_log(df, log)
    job = write_job(folder, log, train=NIGHTLY, models={"baselines": ["p-topfreq"], "dnntsp": DNNTSP},
                    keep_runs=1)
    out = {"job": job, "run_dir": folder / "run"}
    out["night1"] = run(job)
    out["night1_metrics"] = json.loads((folder / "run" / "metrics.json").read_text())
    out["rerun1"] = run(job)
    df2 = _night_two(df)
    write_log(df2, log)
    out["night2"] = run(job)
    out["night2_metrics"] = json.loads((folder / "run" / "metrics.json").read_text())
    out["night2_html"] = (folder / "run" / "report.html").read_text()
    out["night2_recs"] = pd.read_parquet(folder / "run" / "recommendations.parquet")
    out["night2_log"] = df2
    out["rerun2"] = run(job)
    return out


def test_the_sample_trains_and_everyone_is_scored(nights):
    nightly = nights["night1_metrics"]["nightly"]
    assert (nightly["sample"]["sampled"], nightly["sample"]["customers"], nightly["sample"]["seed"]) == (80, 150, 1)
    assert nightly["sample"]["validate"] <= 80 < nightly["sample"]["validate_before"]
    assert "warm_start" not in nightly  # night 1: nothing before it
    # Evaluated on every test customer, recommended to every customer.
    m = nights["night1_metrics"]
    assert m["evaluated_on"]["customers"] > 80 and m["recommendations"]["customers"] == 150
    assert nights["night2_recs"]["customer_id"].nunique() == nights["night2_log"]["customer_id"].nunique()


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


def test_an_explicit_checkpoint_path_and_bad_warm_start_keys(nights, tmp_path):
    ckpt = json.loads((nights["run_dir"] / RUNS_FILE).read_text().splitlines()[0])["checkpoints"]["dnntsp"]
    log = Path(nights["job"]).parent / "log.csv"
    job = write_job(tmp_path / "a", log, train={"warm_start": ckpt}, models={"dnntsp": DNNTSP})
    assert load_job(job).warm_start == {"dnntsp": ckpt}
    bad = [
        ({"warm_start": str(tmp_path / "none.pt")}, r"train\.warm_start: .*none\.pt: no such checkpoint file"),
        ({"warm_start": {"sasrec": "previous"}}, r"train\.warm_start\.sasrec: this job trains no 'sasrec'"),
        ({"sample_customers": 0}, r"train\.sample_customers"),
    ]
    for train, message in bad:
        with pytest.raises(UserError, match=message):
            load_job(write_job(tmp_path / "b", log, train=train, models={"dnntsp": DNNTSP}))


def test_a_warm_start_of_another_architecture_stops_the_job_naming_the_option(nights, tmp_path):
    ckpt = json.loads((nights["run_dir"] / RUNS_FILE).read_text().splitlines()[0])["checkpoints"]["dnntsp"]
    log = Path(nights["job"]).parent / "log.csv"
    job = write_job(tmp_path, log, train={"warm_start": ckpt},
                    models={"baselines": [], "dnntsp": {**DNNTSP, "embed_dim": 4}})
    with pytest.raises(UserError, match="embed_dim 8 there, 4 here"):
        run(job)


def test_neighbour_pool_cap_goes_to_tifu_knn_or_is_a_clear_error(tmp_path):
    import dataclasses

    from basketgnn.scoring.tifu import TifuParams

    log = tmp_path / "log.csv"
    write_log(generate_log(n_customers=20, n_items=10, mean_baskets=4, seed=0), log)
    job = write_job(tmp_path, log, neighbours={"pool_cap": 1000}, models={"baselines": ["tifu-knn"]})
    if "pool_cap" in {f.name for f in dataclasses.fields(TifuParams)}:
        assert dict(load_job(job).baselines)["tifu-knn"]["pool_cap"] == 1000
    else:
        with pytest.raises(UserError, match=r"neighbours\.pool_cap: .*no neighbour-pool cap"):
            load_job(job)


def test_neighbour_pool_cap_also_bounds_each_trained_models_fusion_unless_set_there(tmp_path):
    log = tmp_path / "log.csv"
    write_log(generate_log(n_customers=20, n_items=10, mean_baskets=4, seed=0), log)
    job = write_job(tmp_path / "a", log, neighbours={"pool_cap": 1000}, models={"dnntsp": DNNTSP})
    assert load_job(job).trained["dnntsp"].fusion.neighbour_pool_cap == 1000
    own = {**DNNTSP, "neighbour_pool_cap": 50}
    job = write_job(tmp_path / "b", log, neighbours={"pool_cap": 1000}, models={"dnntsp": own})
    assert load_job(job).trained["dnntsp"].fusion.neighbour_pool_cap == 50
    job = write_job(tmp_path / "c", log, models={"dnntsp": DNNTSP})
    from basketgnn.scoring.tifu import DEFAULT_POOL_CAP

    assert load_job(job).trained["dnntsp"].fusion.neighbour_pool_cap == DEFAULT_POOL_CAP == 20_000
