"""The pipeline file (basketgnn.pipeline.schema): errors naming the key, the checks across
sections, what neighbours.pool_cap and train.warm_start resolve to, the input section as
prepare's options, and pipelines/example.yaml / the README's nightly job as valid jobs."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from basketgnn.data.ingest import Columns, PrepareOptions
from basketgnn.data.synth import generate_log, write_log
from basketgnn.errors import UserError
from basketgnn.pipeline.run import run_pipeline
from basketgnn.pipeline.schema import (
    InputSpec,
    NeighboursSpec,
    TrainSpec,
    in_job_terms,
    load_job,
)
from tests.support.pipeline import BASELINES_ONLY, NIGHTLY_DNNTSP, run, write_job

EXAMPLE = Path(__file__).resolve().parents[2] / "pipelines" / "example.yaml"


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"input": {"engin": "pandas"}},
            r"job\.yaml: input\.engin: unknown key \(valid: .*path, columns, engine",
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


def test_held_out_evaluation_needs_a_training_sample(log, tmp_path):
    with pytest.raises(UserError, match="evaluate.held_out needs train.sample_customers"):
        run(write_job(tmp_path / "h", log[0], **copy.deepcopy(BASELINES_ONLY), evaluate={"held_out": True}))


def test_a_bad_where_stops_the_job_naming_the_key(log, tmp_path):
    config = write_job(tmp_path, log[0], input={"where": "item_id = "})
    with pytest.raises(UserError, match=r"input\.where 'item_id = ' is not usable: Parser Error"):
        run_pipeline(config)
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_prepare_errors_name_the_job_files_keys_not_prepares_flags():
    e = in_job_terms(UserError("bad row 5; use --on-bad-rows skip, or fix --time-col / --last-n."), "job.yaml")
    assert str(e) == (
        "bad row 5; use --on-bad-rows skip, or fix input.columns.timestamp / input.last_n. "
        "In job.yaml, `on_bad_rows: skip` under `input:` skips them."
    )


def test_the_input_section_gives_prepare_every_option_it_sets():
    spec = InputSpec(path="log.csv", columns={"quantity": "qty"}, last_n=4, where="x > 1",
                     keep_returns=True, max_basket_items=None, on_bad_rows="skip")  # fmt: skip
    columns, options = spec.prepare_arguments()
    assert columns == Columns(quantity="qty") and type(options) is PrepareOptions
    assert options == PrepareOptions(last_n=4, where="x > 1", keep_returns=True,
                                     max_basket_items=None, on_bad_rows="skip")  # fmt: skip
    # Every option of prepare is the input section's key of the same name, declared once.
    assert set(PrepareOptions.model_fields) <= set(InputSpec.model_fields)
    for name, field in PrepareOptions.model_fields.items():
        assert InputSpec.model_fields[name].description == field.description


def test_an_explicit_checkpoint_path_and_bad_warm_start_keys(log, tmp_path):
    ckpt = str(tmp_path / "best.pt")
    Path(ckpt).write_bytes(b"")  # load_job checks that the file exists; the run reads it
    job = write_job(tmp_path / "a", log[0], train={"warm_start": ckpt}, models={"dnntsp": NIGHTLY_DNNTSP})
    assert load_job(job).warm_start == {"dnntsp": ckpt}
    bad = [
        ({"warm_start": str(tmp_path / "none.pt")}, r"train\.warm_start: .*none\.pt: no such checkpoint file"),
        ({"warm_start": {"sasrec": "previous"}}, r"train\.warm_start\.sasrec: this job trains no 'sasrec'"),
        ({"sample_customers": 0}, r"train\.sample_customers"),
    ]
    for train, message in bad:
        with pytest.raises(UserError, match=message):
            load_job(write_job(tmp_path / "b", log[0], train=train, models={"dnntsp": NIGHTLY_DNNTSP}))


def test_neighbour_pool_cap_goes_to_tifu_knn_or_is_a_clear_error(tmp_path):
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
    job = write_job(tmp_path / "a", log, neighbours={"pool_cap": 1000}, models={"dnntsp": NIGHTLY_DNNTSP})
    assert load_job(job).trained["dnntsp"].fusion.neighbour_pool_cap == 1000
    own = {**NIGHTLY_DNNTSP, "neighbour_pool_cap": 50}
    job = write_job(tmp_path / "b", log, neighbours={"pool_cap": 1000}, models={"dnntsp": own})
    assert load_job(job).trained["dnntsp"].fusion.neighbour_pool_cap == 50
    job = write_job(tmp_path / "c", log, models={"dnntsp": NIGHTLY_DNNTSP})
    from basketgnn.scoring.tifu import DEFAULT_POOL_CAP

    assert load_job(job).trained["dnntsp"].fusion.neighbour_pool_cap == DEFAULT_POOL_CAP == 20_000


def test_example_sets_every_input_and_column_key():
    raw = yaml.safe_load(EXAMPLE.read_text())
    assert set(raw["input"]) == set(InputSpec.model_fields)
    assert set(raw["input"]["columns"]) == set(Columns.model_fields)
    job = load_job(EXAMPLE)
    assert job.spec.input.where is None and job.spec.input.max_basket_items is None


def test_example_documents_the_nightly_keys():
    raw = yaml.safe_load(EXAMPLE.read_text())
    assert set(raw["train"]) == set(TrainSpec.model_fields)
    assert set(raw["neighbours"]) == set(NeighboursSpec.model_fields)
    job = load_job(EXAMPLE)
    assert job.warm_start == {} and job.spec.train.sample_customers is None
    assert "keep_runs" in raw and job.spec.keep_runs is None


def test_the_readme_nightly_example_is_a_valid_job(tmp_path):
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    block = re.search(r"```yaml\n(run_dir: /data/nightly.*?)```", readme, re.S)
    assert block is not None
    (tmp_path / "nightly.yaml").write_text(block.group(1))
    job = load_job(tmp_path / "nightly.yaml")
    assert job.warm_start == {"dnntsp": "previous"} and job.spec.train.sample_customers == 50000


def test_an_item_catalogue_in_the_job_reaches_the_model_and_its_errors_name_the_keys(log, tmp_path):
    import pandas as pd

    from basketgnn.data.dataset import BasketData

    items = sorted(log[1]["item_id"].astype(str).unique())
    catalogue = pd.DataFrame({"sku": items[1:], "dept": [f"d{k % 4}" for k in range(len(items) - 1)]})
    catalogue.to_csv(tmp_path / "items.csv", index=False)
    model = {**NIGHTLY_DNNTSP, "catalogue_columns": ["dept"]}
    bad = write_job(tmp_path / "bad", log[0], input={"items": {"path": "../items.csv", "id_column": "sku"}},
                    models={"baselines": [], "dnntsp": model})  # fmt: skip
    with pytest.raises(UserError, match=r"items\.csv: 1 of the .* pass input\.items\.missing unknown"):
        run(bad)
    good = write_job(tmp_path / "good", log[0], models={"baselines": [], "dnntsp": model},
                     input={"items": {"path": "../items.csv", "id_column": "sku", "missing": "unknown"}})  # fmt: skip
    run(good)
    data = BasketData.load(next((tmp_path / "good" / "run").rglob("meta.json")).parent)
    assert data.catalogue is not None and data.catalogue.columns == ("dept",)
    assert (data.catalogue.codes[:, 0] == 0).sum() == 1  # the item the catalogue lacks
    assert (tmp_path / "good" / "run" / "recommendations.parquet").is_file()
