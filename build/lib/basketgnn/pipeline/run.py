"""Run a whole job described by one YAML file (see ``pipelines/example.yaml``).

Stages, in order, each in its own folder ``RUN_DIR/stages/<stage>-<hash12>/``::

    prepare -> split -> fit_<model> (one per trained model) -> evaluate -> recommend -> report

``hash`` is the sha256 of (stage name, the stage's settings, the hashes of the stages it reads,
and for ``prepare`` the input files' paths, sizes and modification times). Hashes chain, so a
folder's name stands for everything that produced it: changing the DNNTSP settings gives new
``fit_dnntsp``, ``evaluate``, ``recommend`` and ``report`` folders and reuses ``prepare`` and
``split``. Stages reading ``prepare`` hash its output (the prepared arrays and their
description) instead, so a log file rewritten with the same content reruns only ``prepare``. A stage is done when its folder holds ``_done.json`` (written last, atomically); a
rerun reuses done stages. A folder without ``_done.json`` is what an interrupted run left:
a ``fit_<model>`` stage keeps it and training resumes from its per-epoch ``resume.pt`` (ending exactly
as an uninterrupted run would); any other stage is cleared and redone.

Baselines are cheap: they are fitted inside ``evaluate`` (and in ``recommend`` when one of them
makes the recommendations), on the split's training part, like the trained models. Every stage's work (prepare, split,
fit, evaluate, recommend) is done by the one workflow core, :mod:`basketgnn.workflow`; models
are named by their registry name (:mod:`basketgnn.registry`).

Nightly runs (the ``train`` section): ``train.sample_customers`` fits every model on a seeded
sample of customers (:mod:`basketgnn.data.sample`; part of the ``split`` stage, whose test part
stays whole), while every customer is evaluated and recommended; ``train.warm_start`` starts
each trained model from an earlier checkpoint (:mod:`basketgnn.engine.warm_start`), ``previous``
being the model's best.pt of the last successful run of this run folder on other data. Every
successful run appends one line to ``RUN_DIR/runs.jsonl`` (when, the data's hash, each trained
model's checkpoint): that is where ``previous`` looks. Resolving ``previous`` past runs on the
same data makes a rerun of an unchanged job start from the same checkpoint, so it reuses every
stage. The checkpoint's hash is part of the fit stage's hash. With ``keep_runs: N`` a successful
run then deletes the finished stage folders that none of the last N successful runs used nor
warm-started from (:func:`prune_stages`).

At the end, the top-level outputs are copied from the stage folders into RUN_DIR as one set:
``recommendations.parquet`` / ``.csv``, ``metrics.json``, ``report.html`` and its
``report_*.png`` charts. They are staged whole in ``RUN_DIR/.publishing/`` first and renamed
into place only then (:func:`basketgnn.io_utils.publish_files`): a crash before the renames
leaves the previous set untouched, and one among the renames is completed when the next run
starts. Every run appends its messages to ``RUN_DIR/pipeline.log``.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console

from basketgnn import __version__, registry
from basketgnn.data.ingest import DEFAULT_MAX_BASKET_ITEMS, report_lines
from basketgnn.errors import UserError
from basketgnn.io_utils import file_sha256, finish_publishing, publish_files, write_json, write_text
from basketgnn.workflow.config import describe_validation_error, load_yaml, resolve_path

if TYPE_CHECKING:
    from basketgnn.data.dataset import BasketData
    from basketgnn.data.split import Split
    from basketgnn.workflow.config import Settings


# Part of every stage hash: bump it when a stage's outputs change meaning, so folders written by
# older code are not reused.
CACHE_VERSION = 2
DONE_FILE = "_done.json"
LOG_FILE = "pipeline.log"
RUNS_FILE = "runs.jsonl"
#: ``train.warm_start`` value: the model's checkpoint of the last successful run (on other data).
PREVIOUS = "previous"
RECOMMENDATION_FILES = ("recommendations.parquet", "recommendations.csv")
EVALUATED_PART = "test"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ColumnsSpec(_Section):
    customer: str = Field("customer_id", description="Customer id column.")
    item: str = Field("item_id", description="Item id column.")
    basket: str | None = Field(
        "basket_id", description="Basket id column; null when the log has none."
    )
    timestamp: str | None = Field(
        "timestamp", description="Timestamp column; null when the log has none."
    )
    quantity: str | None = Field(
        None,
        description="Quantity column: rows with quantity <= 0 are returns, excluded unless "
        "input.keep_returns; null: every row is a purchase.",
    )


class InputSpec(_Section):
    path: str = Field(
        description="Transaction log: a CSV/Parquet file or a folder of them, or a DNNTSP .json split."
    )
    columns: ColumnsSpec = Field(
        default_factory=ColumnsSpec, description="Column names of the log."
    )
    engine: Literal["duckdb"] = Field(
        "duckdb",
        description="The ingestion engine: duckdb, the only one (reads the log out of core).",
    )
    memory_limit: str | None = Field(
        None, description="Memory limit of the DuckDB ingestion, e.g. '2GB' (null: its default)."
    )
    on_bad_rows: Literal["error", "skip"] = Field(
        "error",
        description="A row without customer/item/basket or with a bad timestamp: stop or skip.",
    )
    min_item_baskets: int = Field(
        1, ge=1, description="Drop items bought in fewer baskets than this."
    )
    min_baskets: int = Field(2, ge=2, description="Drop customers with fewer baskets than this.")
    max_baskets: int | None = Field(
        None, ge=2, description="Drop customers with more baskets than this."
    )
    last_n: int | None = Field(None, ge=1, description="Keep only each customer's last N baskets.")
    where: str | None = Field(
        None,
        description="DuckDB condition over the log's columns; rows where it is not true are "
        "dropped and counted.",
    )
    keep_returns: bool = Field(
        False, description="Keep rows with quantity <= 0 as ordinary rows (still counted)."
    )
    max_basket_items: int | None = Field(
        DEFAULT_MAX_BASKET_ITEMS,
        ge=1,
        description="Cap every basket at its N most popular items (null: no cap).",
    )
    time_format: str | None = Field(
        None, description="strptime format of non-ISO timestamps, e.g. '%m/%d/%Y %H:%M'."
    )


class SplitSpec(_Section):
    kind: Literal["auto", "temporal", "random", "predefined"] = Field(
        "auto", description="auto: predefined for DNNTSP .json input, else temporal."
    )
    seed: int = Field(0, description="Seed of the random split.")


DEFAULT_BASELINES = ["g-topfreq", "p-topfreq", "tifu-knn"]


class ModelsSpec(_Section):
    """``baselines``, and one key per trained model: its registry name (``dnntsp``, ...) with
    its options overriding the defaults (`basketgnn config --model NAME`); null: not trained.
    Without any such key the default model (dnntsp) is trained with its defaults."""

    model_config = ConfigDict(extra="allow")

    baselines: list[str | dict[str, dict[str, Any]]] = Field(
        default_factory=lambda: list(DEFAULT_BASELINES),
        description="Baseline names, or {name: {option: value}} to set a baseline's options.",
    )

    def trained(self) -> dict[str, dict[str, Any] | None]:
        """Trained-model name -> its options (None: switched off), as written."""
        given = dict(self.model_extra or {})
        if not given:
            given = {registry.DEFAULT_MODEL: {}}
        return given


class RecommendSpec(_Section):
    k: int = Field(20, ge=1, description="Items recommended per customer.")
    model: str = Field(
        registry.DEFAULT_MODEL,
        description="The model (registry name) that makes the recommendations, or auto (the "
        "model with the best validation criterion, the mean of recall, NDCG and PHR at 10 and 20 "
        "on the validation customers).",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads for scoring a trained model (null: the model's own threads). "
        "With 2 or more, the TIFU-KNN neighbour search runs beside the model's forward; the "
        "recommendations are the same either way.",
    )


class EvaluateSpec(_Section):
    customers: int | None = Field(
        None,
        ge=1,
        description="Evaluate every model on a seeded sample of this many test customers (null: "
        "all of them). For big logs: the metrics' cost stays bounded; recommend still scores "
        "every customer.",
    )
    seed: int = Field(0, description="Seed of that sample.")
    held_out: bool = Field(
        False,
        description="Evaluate only customers outside the training sample (train.sample_customers), "
        "whom no model trained or validated on.",
    )


class TrainSpec(_Section):
    warm_start: str | dict[str, str] | None = Field(
        None,
        description="Start each trained model from an earlier checkpoint of the same model and "
        "architecture: previous (its best.pt of the last successful run of this run_dir on other "
        "data; from scratch when there is none), a path to a best.pt (a job training one model), "
        "or {model: previous | path}. null: from scratch.",
    )
    sample_customers: int | None = Field(
        None,
        ge=1,
        description="Fit every model on a seeded sample of this many customers (drawn by id; "
        "validation customers come from the sample); every customer is still evaluated and "
        "recommended. null: all customers.",
    )
    sample_seed: int = Field(0, description="Seed of the customer sample.")


class NeighboursSpec(_Section):
    pool_cap: int | None = Field(
        None,
        ge=1,
        description="Most customers in TIFU-KNN's neighbour pool (a bounded search for very large "
        "logs, a seeded sample): passed to TIFU-KNN as pool_cap and to each trained model's TIFU "
        "fusion as neighbour_pool_cap (unless its options set it). null: their own defaults "
        "(20,000).",
    )


class ReportSpec(_Section):
    title: str = Field("Next-basket recommendations", description="Title of report.html.")


class PipelineSpec(_Section):
    """The YAML file. Relative paths are relative to the YAML file's folder."""

    run_dir: str = Field(description="Folder of every output and of the stage cache.")
    input: InputSpec
    split: SplitSpec = Field(default_factory=SplitSpec)
    models: ModelsSpec = Field(default_factory=ModelsSpec)
    evaluate: EvaluateSpec = Field(default_factory=EvaluateSpec)
    recommend: RecommendSpec = Field(default_factory=RecommendSpec)
    report: ReportSpec = Field(default_factory=ReportSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    neighbours: NeighboursSpec = Field(default_factory=NeighboursSpec)
    keep_runs: int | None = Field(
        None,
        ge=1,
        description="After a successful run, delete the finished stage folders that none of the "
        "last N successful runs used (nor the checkpoints they warm-started from), so a nightly "
        "job's run_dir does not grow without end. null: keep every stage folder.",
    )


@dataclass(frozen=True)
class Job:
    """A checked pipeline file with its paths resolved."""

    config_path: Path
    spec: PipelineSpec
    run_dir: Path
    input_path: Path
    baselines: list[tuple[str, dict[str, Any]]]
    trained: dict[str, Settings]
    """Trained models (registry name -> config), in file order."""
    warm_start: dict[str, str]
    """Trained model -> ``previous`` or a checkpoint's absolute path (absent: from scratch)."""


def load_job(config_path: str | Path) -> Job:
    """Read and check a pipeline YAML file.

    Unknown keys and bad values are a :class:`UserError` naming the key (``input.engine``, ...).
    """
    from basketgnn.registry import make_baseline
    from basketgnn.workflow.config import load_config

    config_path = Path(config_path)
    raw = load_yaml(
        config_path,
        "the pipeline file (a mapping with run_dir, input, split, models, recommend and report; "
        "see pipelines/example.yaml)",
    )
    try:
        spec = PipelineSpec(**raw)
    except ValidationError as e:
        raise UserError(
            f"{config_path}: {describe_validation_error(e, PipelineSpec)}. "
            "See pipelines/example.yaml."
        ) from None

    base = config_path.resolve().parent
    baselines: list[tuple[str, dict[str, Any]]] = []
    for i, entry in enumerate(spec.models.baselines):
        if isinstance(entry, str):
            name, options = entry, {}
        elif len(entry) == 1:
            name, options = next(iter(entry.items()))
        else:
            raise UserError(
                f"{config_path}: models.baselines[{i}]: write one baseline per entry, "
                f"e.g. {{tifu-knn: {{k: 100}}}}, not {entry}."
            )
        try:
            make_baseline(name, **options)
        except UserError as e:
            raise UserError(f"{config_path}: models.baselines[{i}]: {e}") from None
        if name in {b for b, _ in baselines}:
            raise UserError(f"{config_path}: models.baselines lists {name!r} twice.")
        baselines.append((name, options))

    trained: dict[str, Settings] = {}
    for name, options in spec.models.trained().items():
        registry.check_name(name, f"{config_path}: models.{name}: ", "neural")
        if options is None:
            continue
        if not isinstance(options, dict):
            raise UserError(
                f"{config_path}: models.{name}: write the model's options as a mapping "
                f"(or {{}} for its defaults, null to leave it out), not {options!r}."
            )
        try:
            trained[name] = load_config(None, model=name, **options)
        except UserError as e:
            raise UserError(f"{config_path}: models.{name}: {e}") from None
        if name in {b for b, _ in baselines}:
            raise UserError(f"{config_path}: models lists {name!r} twice.")

    baselines = _with_pool_cap(config_path, baselines, spec.neighbours.pool_cap)
    cap = spec.neighbours.pool_cap
    for name, config in trained.items():
        # The trained models' TIFU fusion searches the same bounded pool, unless set there.
        given = spec.models.trained().get(name) or {}
        if cap is not None and "neighbour_pool_cap" not in given:
            trained[name] = config.update(neighbour_pool_cap=cap)
    warm_start = _warm_start_by_model(config_path, base, spec.train.warm_start, list(trained))
    if spec.evaluate.held_out and spec.train.sample_customers is None:
        raise UserError(
            f"{config_path}: evaluate.held_out needs train.sample_customers (customers are held "
            "out of a training sample); set it, or held_out: false."
        )
    models = [b for b, _ in baselines] + list(trained)
    if not models:
        raise UserError(
            f"{config_path}: models: name at least one baseline or trained model "
            f"({', '.join(registry.names('neural'))})."
        )
    if spec.recommend.model not in [*models, AUTO_MODEL]:
        raise UserError(
            f"{config_path}: recommend.model is {spec.recommend.model!r}, which this job does not "
            f"train; choose one of {', '.join(models)} or {AUTO_MODEL}."
        )
    return Job(
        config_path=config_path.resolve(),
        spec=spec,
        run_dir=resolve_path(base, spec.run_dir),
        input_path=resolve_path(base, spec.input.path),
        baselines=baselines,
        trained=trained,
        warm_start=warm_start,
    )


def _with_pool_cap(
    config_path: Path, baselines: list[tuple[str, dict[str, Any]]], cap: int | None
) -> list[tuple[str, dict[str, Any]]]:
    """``neighbours.pool_cap`` given to TIFU-KNN (its ``pool_cap`` option), where it has one."""
    import dataclasses

    from basketgnn.registry import make_baseline
    from basketgnn.scoring.tifu import TifuParams

    if cap is None:
        return baselines
    if "pool_cap" not in {f.name for f in dataclasses.fields(TifuParams)}:
        raise UserError(
            f"{config_path}: neighbours.pool_cap: this basketgnn's TIFU-KNN has no neighbour-pool "
            "cap (TifuParams.pool_cap); remove the key."
        )
    out = []
    for name, options in baselines:
        if name == "tifu-knn":
            options = {**options, "pool_cap": cap}
            try:
                make_baseline(name, **options)
            except UserError as e:
                raise UserError(f"{config_path}: neighbours.pool_cap: {e}") from None
        out.append((name, options))
    return out


def _warm_start_by_model(
    config_path: Path, base: Path, given: str | dict[str, str] | None, trained: list[str]
) -> dict[str, str]:
    """``train.warm_start`` per trained model: ``previous`` or a checked absolute path."""
    if given is None:
        return {}
    if isinstance(given, str):
        if given != PREVIOUS and len(trained) != 1:
            raise UserError(
                f"{config_path}: train.warm_start: a checkpoint path fits one trained model, and "
                f"this job trains {len(trained)} ({', '.join(trained) or 'none'}); write "
                "{model: path} for each, or previous."
            )
        given = {name: given for name in trained}
    out = {}
    for name, value in given.items():
        if name not in trained:
            raise UserError(
                f"{config_path}: train.warm_start.{name}: this job trains no {name!r}; name one "
                f"of {', '.join(trained) or '(none: models trains no model)'}."
            )
        if value == PREVIOUS:
            out[name] = PREVIOUS
            continue
        path = resolve_path(base, value)
        if not path.is_file():
            raise UserError(
                f"{config_path}: train.warm_start: {path}: no such checkpoint file; give a best.pt "
                f"of an earlier run, or {PREVIOUS}."
            )
        out[name] = str(path)
    return out


@dataclass(frozen=True)
class _Stage:
    name: str
    key: str
    dir: Path
    info: dict[str, Any]
    """The stage's ``_done.json``: what it computed, its settings and how long it took."""

    @property
    def output_key(self) -> str:
        """What stages reading this one hash: the hash of its output when it records one
        (``prepare`` does, so a log re-exported with the same content reruns nothing else)."""
        return self.info.get("output_hash", self.key)


def run_pipeline(
    config_path: str | Path, *, progress: bool = True, console: Console | None = None
) -> dict[str, Any]:
    """Run (or resume, or reuse) the job of a pipeline YAML file.

    Args:
        config_path: the pipeline YAML file.
        progress: show training progress bars.
        console: where stage lines go (default: a new console on stdout).

    Returns a summary: ``stages`` (name, status ``ran`` / ``resumed`` / ``cached``, folder,
    seconds), ``ran`` and ``cached`` (stage names), ``outputs`` (paths) and ``seconds``.
    Raises :class:`UserError` for a bad pipeline file or input; the message is also logged.
    """
    job = load_job(config_path)
    job.run_dir.mkdir(parents=True, exist_ok=True)
    console = console or Console(soft_wrap=True)
    with _exclusive(job.run_dir), _run_log(job.run_dir / LOG_FILE) as logger:
        logger.info(
            "==== pipeline run %s | %s | basketgnn %s | pid %d ====",
            datetime.datetime.now().isoformat(timespec="seconds"),
            job.config_path,
            __version__,
            os.getpid(),
        )
        logger.info("settings: %s", json.dumps(job.spec.model_dump()))
        runner = _Runner(job, console, logger, progress)
        try:
            return runner.run()
        except KeyboardInterrupt:
            runner.say(
                f"interrupted in stage {runner.current}; run the same command again to resume",
                style="yellow",
                level=logging.WARNING,
            )
            raise
        except UserError as e:
            # The caller shows the message; the log keeps it too.
            logger.error("stopped in stage %s: %s", runner.current, e)
            raise
        except Exception:
            logger.exception("failed in stage %s", runner.current)
            raise


@contextlib.contextmanager
def _exclusive(run_dir: Path) -> Iterator[None]:
    """Only one run at a time per run folder (two would clear each other's unfinished stages)."""
    with open(run_dir / ".pipeline.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{run_dir} is in use by another pipeline run; wait for it to finish or set "
                "another run_dir."
            ) from None
        yield


@contextlib.contextmanager
def _run_log(path: Path) -> Iterator[logging.Logger]:
    logger = logging.getLogger("basketgnn.pipeline")
    logger.setLevel(logging.INFO)
    # Stage lines already go to the console; keep them out of any root handler.
    logger.propagate = False
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


def _stage_key(name: str, settings: Any, deps: list[_Stage], extra: dict[str, Any]) -> str:
    payload = {
        "cache_version": CACHE_VERSION,
        "basketgnn": __version__,
        "stage": name,
        "settings": settings,
        "deps": [d.output_key for d in deps],
        **extra,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class _Runner:
    def __init__(self, job: Job, console: Console, logger: logging.Logger, progress: bool) -> None:
        self.job = job
        self.console = console
        self.logger = logger
        self.progress = progress
        self.t_start = time.perf_counter()
        self.n_stages = 5 + len(job.trained)
        self.index = 0
        self.current = "(setup)"
        self.stages: list[dict[str, Any]] = []
        self._data: BasketData | None = None
        self._split: Split | None = None

    def say(self, message: str, style: str | None = None, level: int = logging.INFO) -> None:
        elapsed = time.perf_counter() - self.t_start
        self.console.print(
            f"[{elapsed:6.1f}s] {message}", style=style, markup=False, highlight=False
        )
        self.logger.log(level, message)

    # -- the stage machinery ------------------------------------------------------------------

    def stage(
        self,
        name: str,
        settings: Any,
        deps: list[_Stage],
        compute: Callable[[Path], dict[str, Any]],
        *,
        resumable: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> _Stage:
        """Reuse the stage's folder when done, else (re)compute it; see the module docstring."""
        self.index += 1
        self.current = name
        key = _stage_key(name, settings, deps, extra or {})
        folder = self.job.run_dir / "stages" / f"{name}-{key[:12]}"
        label = f"[stage {self.index}/{self.n_stages}] {name}"
        done = folder / DONE_FILE
        if done.is_file():
            info = json.loads(done.read_text())
            self.say(f"{label}: cached ({folder.name})")
            self.stages.append(
                {"name": name, "status": "cached", "dir": str(folder), "seconds": 0.0}
            )
            return _Stage(name, key, folder, info)
        status = "ran"
        if folder.exists() and resumable:
            status = "resumed"
            self.say(f"{label}: resuming the unfinished run in {folder.name}", style="yellow")
        else:
            if folder.exists():
                self.say(f"{label}: clearing what an interrupted run left in {folder.name}")
                shutil.rmtree(folder)
            self.say(f"{label}: running -> stages/{folder.name}", style="bold")
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        result = compute(folder)
        seconds = round(time.perf_counter() - t0, 3)
        info = {
            "stage": name,
            "key": key,
            "settings": settings,
            "deps": {d.name: d.output_key for d in deps},
            "seconds": seconds,
            **(extra or {}),
            **result,
        }
        write_json(done, info)
        self.say(f"{label}: done in {seconds:.1f}s", style="green")
        self.stages.append({"name": name, "status": status, "dir": str(folder), "seconds": seconds})
        return _Stage(name, key, folder, info)

    def data(self, prepare: _Stage) -> BasketData:
        if self._data is None:
            from basketgnn.data.dataset import BasketData

            self._data = BasketData.load(prepare.dir / "data")
        return self._data

    def split(self, split: _Stage, prepare: _Stage) -> Split:
        if self._split is None:
            from basketgnn.data.split import load_split

            self._split = load_split(split.dir / "split.json", self.data(prepare))
        return self._split

    # -- the job --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        job = self.job
        spec = job.spec
        self.say(f"pipeline {job.config_path} -> {job.run_dir}", style="bold")
        if finish_publishing(job.run_dir):
            self.say(
                "  moved into place the rest of the outputs an interrupted run had staged",
                style="yellow",
            )

        inp = spec.input.model_dump(exclude={"memory_limit"})  # a memory limit changes no result
        inp["path"] = str(job.input_path)
        prepare = self.stage(
            "prepare", inp, [], self._prepare, extra={"files": _input_files(job.input_path)}
        )
        self._show_data(prepare.info)

        kind = spec.split.kind
        if kind == "auto":
            kind = "predefined" if prepare.info["has_predefined_split"] else "temporal"
        split_settings: dict[str, Any] = {"kind": kind}
        if kind == "random":
            split_settings["seed"] = spec.split.seed  # other kinds ignore it: no needless rerun
        if spec.train.sample_customers is not None:
            split_settings["sample"] = {"customers": spec.train.sample_customers,
                                        "seed": spec.train.sample_seed}
        split = self.stage(
            "split", split_settings, [prepare], lambda d: self._make_split(d, prepare, kind)
        )
        self.say(
            f"  {split.info['name']}: "
            + ", ".join(f"{n:,} {p}" for p, n in split.info["sizes"].items())
            + " customers"
        )
        if "sample" in split.info:
            from basketgnn.data.sample import CustomerSample

            self.say("  " + CustomerSample(**split.info["sample"]).describe())

        fits: dict[str, _Stage] = {}
        for name, config in job.trained.items():
            warm = self._warm_start_checkpoint(name, prepare)
            fits[name] = self.stage(
                f"fit_{name}",
                # Where training runs is no part of what it computes (as for resume.pt).
                {k: v for k, v in config.dump().items() if k not in ("device", "threads")},
                [split],
                lambda d, name=name, warm=warm: self._fit(d, name, prepare, split, warm),
                resumable=True,
                extra=None if warm is None else {"warm_start": {"checkpoint": str(warm),
                                                                "sha256": file_sha256(warm)}},
            )
            info = fits[name].info
            self.say(
                f"  best epoch {info['best_epoch']} of {info['epochs_run']}, validation "
                f"mean NDCG {info['best_validation']['mean_ndcg']:.4f}"
            )

        eval_settings: dict[str, Any] = {
            "baselines": [[n, o] for n, o in job.baselines], "part": EVALUATED_PART,
            "validation": "criterion/1",
        }  # fmt: skip
        if spec.evaluate.customers is not None or spec.evaluate.held_out:
            eval_settings["sample"] = spec.evaluate.model_dump()  # unset: earlier hashes kept
        evaluate = self.stage(
            "evaluate",
            eval_settings,
            [split, *fits.values()],
            lambda d: self._evaluate(d, prepare, split, fits),
        )
        records = json.loads((evaluate.dir / "results.json").read_text())
        self._show_results(records)

        model, selection = spec.recommend.model, None
        if model == AUTO_MODEL:
            from basketgnn.workflow import select_by_validation

            model, selection = select_by_validation(records)
            self.say(f"  recommend.model auto: {selection['reason']}")
        rec_settings: dict[str, Any] = {"model": model, "k": spec.recommend.k}
        if selection is not None:
            rec_settings["selection"] = selection
        if model in fits:
            rec_deps = [prepare, fits[model]]
        else:
            rec_settings["options"] = dict(job.baselines)[model]
            rec_deps = [prepare, split]
        recommend = self.stage(
            "recommend",
            rec_settings,
            rec_deps,
            lambda d: self._recommend(d, prepare, split, fits, model, selection),
        )

        stages = [prepare, split, *fits.values(), evaluate, recommend]
        report = self.stage(
            "report",
            {"title": spec.report.title},
            stages,
            lambda d: self._report(d, prepare, split, fits, evaluate, recommend, records),
        )

        self.current = "(outputs)"
        published = [recommend.dir / f for f in RECOMMENDATION_FILES]
        published += [report.dir / f for f in report.info["files"]]
        self._publish(published)
        self._record_success(prepare, fits)
        out = {p.name: job.run_dir / p.name for p in published}
        outputs = {
            "recommendations_parquet": out["recommendations.parquet"],
            "recommendations_csv": out["recommendations.csv"],
            "metrics": out["metrics.json"],
            "report": out["report.html"],
            "charts": [out[f] for f in report.info["charts"]],
            "log": job.run_dir / LOG_FILE,
        }
        seconds = time.perf_counter() - self.t_start
        ran = [s["name"] for s in self.stages if s["status"] != "cached"]
        self.say(
            f"finished in {seconds:.1f}s ({len(ran)} stage(s) run, "
            f"{len(self.stages) - len(ran)} cached): {outputs['report']}, {outputs['metrics']}, "
            f"{outputs['recommendations_parquet']} (and .csv)",
            style="bold green",
        )
        return {
            "run_dir": job.run_dir,
            "stages": self.stages,
            "ran": ran,
            "cached": [s["name"] for s in self.stages if s["status"] == "cached"],
            "outputs": outputs,
            "seconds": seconds,
        }

    def _warm_start_checkpoint(self, name: str, prepare: _Stage) -> Path | None:
        """The checkpoint ``name`` starts from (``train.warm_start``), None: from scratch."""
        given = self.job.warm_start.get(name)
        if given is None:
            return None
        if given != PREVIOUS:
            return Path(given)
        found = previous_checkpoint(self.job.run_dir, name, prepare.output_key)
        if found is None:
            self.say(f"  {name}: no earlier successful run on other data has a checkpoint of it "
                     f"(train.warm_start: {PREVIOUS}): training from scratch")
        return found

    def _record_success(self, prepare: _Stage, fits: dict[str, _Stage]) -> None:
        """One line in RUNS_FILE for this finished run (see the module docstring)."""
        path = self.job.run_dir / RUNS_FILE
        record = {
            "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "data": prepare.output_key,
            "checkpoints": {name: str(fit.dir / "best.pt") for name, fit in fits.items()},
            "stages": [Path(s["dir"]).name for s in self.stages],
            "warm_start": {name: fit.info["warm_start"]["checkpoint"]
                           for name, fit in fits.items() if "warm_start" in fit.info},
        }
        before = path.read_text() if path.is_file() else ""
        if before and not before.endswith("\n"):
            before += "\n"
        write_text(path, before + json.dumps(record) + "\n")
        if self.job.spec.keep_runs is not None:
            removed = prune_stages(self.job.run_dir, self.job.spec.keep_runs)
            if removed:
                self.say(f"  keep_runs {self.job.spec.keep_runs}: deleted {len(removed)} stage "
                         f"folder(s) no kept run uses: {', '.join(removed)}")

    def _publish(self, files: list[Path]) -> None:
        """Copy stage outputs to the run folder as one set (see :func:`publish_files`);
        identical files are left alone, charts an earlier job had and this one has not go."""
        stale = [p.name for p in self.job.run_dir.glob("report_*.png")]
        publish_files(self.job.run_dir, files, remove=stale)

    # -- the stages -----------------------------------------------------------------------------

    def _prepare(self, folder: Path) -> dict[str, Any]:
        from basketgnn import workflow
        from basketgnn.data.ingest import Columns, PrepareOptions
        from basketgnn.fingerprint import data_fingerprint

        inp = self.job.spec.input
        path = self.job.input_path
        columns = Columns(
            customer=inp.columns.customer,
            item=inp.columns.item,
            basket=inp.columns.basket,
            timestamp=inp.columns.timestamp,
            quantity=inp.columns.quantity,
        )
        options = PrepareOptions(
            min_item_baskets=inp.min_item_baskets,
            last_n_baskets=inp.last_n,
            min_baskets=inp.min_baskets,
            max_baskets=inp.max_baskets,
            on_bad_rows=inp.on_bad_rows,
            where=inp.where,
            keep_returns=inp.keep_returns,
            max_basket_items=inp.max_basket_items,
            time_format=inp.time_format,
        )
        if not (path.is_file() and path.suffix == ".json"):
            self.say(f"  reading {path} with {inp.engine}")
        try:
            data = workflow.prepare(path, columns, options, inp.memory_limit)
        except UserError as e:
            raise _in_job_terms(e, self.job.config_path.name) from None
        data.save(folder / "data")
        described = {
            "source": str(path),
            "engine": inp.engine,
            "customers": data.n_users,
            "items": data.n_items,
            "baskets": data.n_baskets,
            "has_predefined_split": data.has_predefined_split,
            "report": data.meta.get("report", {}),
        }
        return {"output_hash": data_fingerprint(data, described=described), **described}

    def _show_data(self, info: dict[str, Any]) -> None:
        self.say(
            f"  {info['customers']:,} customers, {info['items']:,} items, {info['baskets']:,} "
            f"baskets from {info['source']}"
        )
        report = info.get("report", {})
        for line in report_lines(report):
            self.say(f"  {line}")
        if report.get("rows_skipped"):
            self.say(
                f"  skipped {report['rows_skipped']:,} bad row(s) of {report['rows_read']:,}: "
                + " | ".join(report.get("skipped_because", [])),
                style="yellow",
                level=logging.WARNING,
            )

    def _make_split(self, folder: Path, prepare: _Stage, kind: str) -> dict[str, Any]:
        from basketgnn import workflow
        from basketgnn.data.split import save_split

        data = self.data(prepare)
        split = workflow.split(data, kind, self.job.spec.split.seed)
        sampled = None
        if (n := self.job.spec.train.sample_customers) is not None:
            from basketgnn.data.sample import sample_split

            split, sampled = sample_split(split, data, n, self.job.spec.train.sample_seed)
        save_split(split, data, folder / "split.json")
        info: dict[str, Any] = {"name": split.name, "sizes": {p: len(inst) for p, inst in split.parts.items()}}
        return info if sampled is None else {**info, "sample": sampled.as_dict()}

    def _fit(
        self, folder: Path, name: str, prepare: _Stage, split: _Stage, warm: Path | None = None
    ) -> dict[str, Any]:
        from basketgnn import workflow
        from basketgnn.engine.trainer import describe_left_out

        settings = self.job.trained[name]
        epochs = settings.model.epochs
        data, sp = self.data(prepare), self.split(split, prepare)
        self.say(
            f"  {name} on {len(sp['train']):,} training and {len(sp['validate']):,} validation "
            f"customers, at most {epochs} epochs"
            + (f", starting from {warm} (train.warm_start)" if warm is not None else "")
        )

        def on_epoch(r: dict[str, Any]) -> None:
            self.say(
                f"  epoch {r['epoch']}/{epochs}: loss {r['train_loss']:.4f}, validation "
                f"mean NDCG {r['val_mean_ndcg']:.4f}, recall@10 {r.get('val_recall@10', float('nan')):.4f} "
                f"({r['train_s'] + r['validate_s']:.1f}s)" + ("  best" if r["best"] else "")
            )

        # The stamp lets `basketgnn predict/evaluate --checkpoint` find this run's data and split.
        stamp = workflow.data_stamp(prepare.dir / "data", split.dir / "split.json")
        outcome = workflow.train(
            workflow.ModelEntry(name, settings, out_dir=folder, warm_start=warm, stamp=stamp), data, sp,
            progress=self.progress, on_epoch=on_epoch,
        )
        result = outcome.training
        assert result is not None
        if result.warm_start is not None:
            self.say(f"  {result.warm_start.describe()}; epoch 0 is that model")
        if result.left_out_baskets:
            self.say("  " + describe_left_out(result.left_out_baskets))
        history = result.history
        return {
            "best_epoch": result.best_epoch,
            "epochs_run": result.epochs_run,
            "best_validation": _finite(result.best_validation),
            # Summed per epoch, so a resumed training counts its earlier epochs too.
            "train_seconds": round(sum(r["train_s"] + r["validate_s"] for r in history), 3),
            **({"warm_start": result.warm_start.as_dict()} if result.warm_start is not None else {}),
            **({"left_out_baskets": result.left_out_baskets} if result.left_out_baskets else {}),
        }

    def _trained(self, name: str, fit: _Stage) -> Any:
        from basketgnn.workflow import load_trained

        return load_trained(fit.dir / "best.pt", self.job.trained[name].model.device)

    def _evaluate(
        self, folder: Path, prepare: _Stage, split: _Stage, fits: dict[str, _Stage]
    ) -> dict[str, Any]:
        from basketgnn import workflow

        data, sp = self.data(prepare), self.split(split, prepare)
        ev, train = self.job.spec.evaluate, self.job.spec.train
        trained_on = None
        if ev.held_out and train.sample_customers is not None:
            from basketgnn.data.sample import sampled_customers

            trained_on = sampled_customers(data.user_ids, train.sample_customers, train.sample_seed)
        sp = evaluation_split(sp, ev, trained_on)
        if ev.customers is not None or trained_on is not None:
            self.say(
                f"  evaluating on {len(sp[EVALUATED_PART]):,} {EVALUATED_PART} customers"
                + (" outside the training sample" if trained_on is not None else "")
                + (f" (a sample, seed {ev.seed})" if ev.customers is not None else "")
            )
        source = prepare.info["source"]
        records = []
        for name, options in self.job.baselines:
            outcome = workflow.train(workflow.ModelEntry(name, options), data, sp)
            result = workflow.evaluate(outcome, data, sp, EVALUATED_PART, source, with_validation=True)
            records.append(result.to_json())
            self.say(f"  {name}: fitted and evaluated in {sum(result.timing_s.values()):.1f}s")
        for name, fit in fits.items():
            # Trained in its fit stage: only evaluated here, with that stage's fit time.
            outcome = workflow.FitOutcome(
                workflow.ModelEntry(name), self._trained(name, fit), fit.info["train_seconds"]
            )
            result = workflow.evaluate(outcome, data, sp, EVALUATED_PART, source, with_validation=True)
            record = result.to_json()
            record["params"].update(
                best_epoch=fit.info["best_epoch"], epochs_run=fit.info["epochs_run"]
            )
            records.append(record)
            self.say(f"  {name}: evaluated in {result.timing_s['score']:.1f}s")
        write_json(folder / "results.json", records)
        return {"models": [r["model"] for r in records], "customers": len(sp[EVALUATED_PART])}

    def _show_results(self, records: list[dict[str, Any]]) -> None:
        from basketgnn.results_table import from_records, to_line

        table = from_records(records, ["recall@10", "ndcg@10", "recall@20", "ndcg@20"])
        for i in range(len(records)):
            self.say(f"  {to_line(table, i)}")

    def _recommend(
        self,
        folder: Path,
        prepare: _Stage,
        split: _Stage,
        fits: dict[str, _Stage],
        name: str,
        selection: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        from basketgnn import workflow
        from basketgnn.workflow.recommendations import write_recommendation_file

        data = self.data(prepare)
        model: Any
        if name in fits:
            model = self._trained(name, fits[name])
            # Scoring threads give the same rows (not part of the stage's key).
            model.with_threads(self.job.spec.recommend.threads)
        else:
            sp = self.split(split, prepare)
            model = workflow.train(workflow.ModelEntry(name, dict(self.job.baselines)[name]), data, sp).recommender
        # Streamed chunk by chunk into both files from one scoring: memory stays that of a
        # chunk, not of every customer's rows (tens of millions at a million customers).
        k = min(self.job.spec.recommend.k, data.n_items)
        rows = write_recommendation_file(model, data, k, [folder / f for f in RECOMMENDATION_FILES])
        self.say(f"  top-{k} by {name} for all {data.n_users:,} customers ({rows:,} rows)")
        info = {"model": name, "k": k, "customers": data.n_users, "rows": rows}
        return info if selection is None else {**info, "selection": selection}

    def _report(
        self,
        folder: Path,
        prepare: _Stage,
        split: _Stage,
        fits: dict[str, _Stage],
        evaluate: _Stage,
        recommend: _Stage,
        records: list[dict[str, Any]],
    ) -> dict[str, Any]:
        from basketgnn.pipeline.report import write_report

        rec_model = recommend.info["model"]  # the chosen one when recommend.model is auto
        charted = rec_model if rec_model in fits else next(iter(fits), None)
        # Only what the stages recorded goes in, so an unchanged job writes identical files.
        summary = {
            "title": self.job.spec.report.title,
            "data": {
                k: prepare.info[k]
                for k in ("source", "engine", "customers", "items", "baskets", "report")
            },
            "split": {
                "name": split.info["name"],
                "kind": split.info["settings"]["kind"],
                "customers": split.info["sizes"],
            },
            "evaluated_on": {
                "part": EVALUATED_PART,
                "customers": evaluate.info.get("customers", split.info["sizes"][EVALUATED_PART]),
            },
            "models": records,
            # The recommending model's training curve when it was trained, else the first's.
            "charted_model": charted,
            **{
                f"{name}_training": {
                    k: fit.info[k]
                    for k in ("best_epoch", "epochs_run", "best_validation", "train_seconds",
                              "left_out_baskets")
                    if k in fit.info
                }
                for name, fit in fits.items()
            },
            "recommendations": {
                **{k: recommend.info[k] for k in ("model", "k", "customers", "rows", "selection")
                   if k in recommend.info},
                "files": list(RECOMMENDATION_FILES),
            },
            "timing_s": {
                s.name: s.info["seconds"] for s in (prepare, split, *fits.values(), evaluate, recommend)
            },
        }
        nightly = nightly_summary(split.info, {n: f.info for n, f in fits.items()},
                                  self.job.spec.neighbours.pool_cap)
        if nightly:
            summary["nightly"] = nightly
        write_json(folder / "metrics.json", summary)
        train_log = None
        if charted is not None:
            lines = (fits[charted].dir / "train_log.jsonl").read_text().splitlines()
            train_log = [json.loads(line) for line in lines if line.strip()]
        charts = write_report(folder, summary, train_log)
        return {"files": ["metrics.json", "report.html", *charts], "charts": charts}


def evaluation_split(sp: Split, spec: EvaluateSpec, trained_on: np.ndarray | None = None) -> Split:
    """``sp`` with its evaluated part restricted to customers outside ``trained_on`` (a mask over
    all users; None: no restriction), then cut to a seeded sample of ``spec.customers`` of them
    (kept in order; all of them when they are no more or no sample is asked for).

    Shapes: trained_on [n_users] bool.
    """
    from basketgnn.data.split import Instances, Split

    part = sp[EVALUATED_PART]
    name = sp.name
    if trained_on is not None:
        keep = ~trained_on[part.users]
        part = Instances(part.users[keep], part.n_history[keep])
        name += ", customers outside the training sample"
        if len(part) == 0:
            raise UserError(
                "evaluate.held_out: every customer is in the training sample; sample fewer "
                "customers (train.sample_customers) or set held_out: false."
            )
    if spec.customers is not None and len(part) > spec.customers:
        rng = np.random.default_rng(spec.seed)
        keep = np.sort(rng.choice(len(part), size=spec.customers, replace=False))
        part = Instances(part.users[keep], part.n_history[keep])
        name += f", {spec.customers} sampled (seed {spec.seed})"
    if part is sp[EVALUATED_PART]:
        return sp
    return Split(name, {**sp.parts, EVALUATED_PART: part})


def previous_checkpoint(run_dir: Path, name: str, data_key: str) -> Path | None:
    """``name``'s checkpoint of the last successful run in ``run_dir`` on data other than
    ``data_key`` whose file still exists (module docstring), None when there is none."""
    for record in reversed(successful_runs(run_dir)):
        checkpoint = record.get("checkpoints", {}).get(name)
        if record.get("data") == data_key or checkpoint is None:
            continue
        if Path(checkpoint).is_file():
            return Path(checkpoint)
    return None


def nightly_summary(
    split_info: dict[str, Any], fit_infos: dict[str, dict[str, Any]], pool_cap: int | None
) -> dict[str, Any]:
    """What a nightly run sampled and reused (metrics.json ``nightly``); empty for a job
    without sample, warm start or pool cap, so its outputs stay as they were."""
    out: dict[str, Any] = {}
    if "sample" in split_info:
        out["sample"] = split_info["sample"]
    warm = {name: info["warm_start"] for name, info in fit_infos.items() if "warm_start" in info}
    if warm:
        out["warm_start"] = warm
    if pool_cap is not None:
        out["neighbour_pool_cap"] = pool_cap
    return out


def successful_runs(run_dir: Path) -> list[dict[str, Any]]:
    """The records of RUNS_FILE, oldest first."""
    path = run_dir / RUNS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: not a finished run
    return records


def prune_stages(run_dir: Path, keep_runs: int) -> list[str]:
    """Delete the finished stage folders (with ``_done.json``) that none of the last
    ``keep_runs`` successful runs used nor warm-started from; returns their names. Unfinished
    folders (a training to resume) stay. Nothing is deleted while a kept run's record predates
    the stage list (written by older code: what it used is unknown)."""
    kept = successful_runs(run_dir)[-keep_runs:]
    if not kept or any("stages" not in r for r in kept):
        return []
    keep = {name for r in kept for name in r["stages"]}
    keep |= {Path(c).parent.name for r in kept for c in r.get("warm_start", {}).values()}
    removed = []
    for folder in sorted((run_dir / "stages").iterdir()):
        if folder.name not in keep and (folder / DONE_FILE).is_file():
            shutil.rmtree(folder)
            removed.append(folder.name)
    return removed


def _input_files(path: Path) -> list[list[Any]]:
    """(path, size, mtime) of every input file: part of the prepare stage's hash."""
    from basketgnn.data.ingest import log_files

    files = [path] if path.is_file() and path.suffix == ".json" else log_files(path)
    return [[str(f.resolve()), (st := f.stat()).st_size, st.st_mtime_ns] for f in files]


# prepare's flags as the job file names them (under input:).
_JOB_KEYS = {
    "--where": "input.where", "--quantity-col": "input.columns.quantity",
    "--keep-returns": "input.keep_returns", "--max-basket-items": "input.max_basket_items",
    "--time-format": "input.time_format", "--customer-col": "input.columns.customer",
    "--item-col": "input.columns.item", "--basket-col": "input.columns.basket",
    "--time-col": "input.columns.timestamp", "--min-baskets": "input.min_baskets",
    "--max-baskets": "input.max_baskets", "--min-item-baskets": "input.min_item_baskets",
    "--last-n": "input.last_n",
}  # fmt: skip


def _in_job_terms(e: UserError, config_name: str) -> UserError:
    """An ingestion error with prepare's flags renamed to the job file's keys."""
    text = str(e)
    if "on-bad-rows" in text:
        text += f" In {config_name}, `on_bad_rows: skip` under `input:` skips them."
    for flag, key in _JOB_KEYS.items():
        text = re.sub(re.escape(flag) + r"\b", key, text)
    return UserError(text)


def _finite(metrics: dict[str, float]) -> dict[str, float | None]:
    return {k: None if math.isnan(v) else round(float(v), 6) for k, v in metrics.items()}


#: ``recommend.model`` value that picks the model by validation (:func:`select_by_validation`).
AUTO_MODEL = "auto"



