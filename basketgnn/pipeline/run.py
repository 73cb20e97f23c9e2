"""Run a whole job described by one YAML file (see ``pipelines/example.yaml``).

Stages, in order, each cached in its own folder of ``RUN_DIR/stages/``
(:mod:`basketgnn.pipeline.cache`)::

    prepare -> split -> fit_<model> (one per trained model) -> evaluate -> recommend -> report

Every stage's work is done by the one workflow core, :mod:`basketgnn.workflow`; models are named
by their registry name. Baselines are cheap: they are fitted inside ``evaluate`` (and in
``recommend`` when one of them makes the recommendations) on the split's training part.
``train.sample_customers`` fits every model on a seeded sample of customers (part of the
``split`` stage), while every customer is evaluated and recommended; ``train.warm_start`` starts
each trained model from an earlier checkpoint, ``previous`` being found in the run history
(:mod:`basketgnn.pipeline.history`), which every successful run extends.

At the end the top-level outputs (``recommendations.parquet`` / ``.csv``, ``metrics.json``,
``report.html`` and its ``report_*.png`` charts) are linked (or copied) from the stage folders into RUN_DIR
as one set (:func:`basketgnn.io_utils.publish_files`): a crash leaves the previous set whole or
a staged set that the next run moves into place first. Every run appends its messages to
``RUN_DIR/pipeline.log``.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console

from basketgnn import __version__
from basketgnn.data.ingest import report_lines
from basketgnn.errors import UserError
from basketgnn.io_utils import file_sha256, finish_publishing, write_json
from basketgnn.pipeline.cache import Stage, StageCache, exclusive, input_files, publish
from basketgnn.pipeline.history import (
    LOG_FILE,
    previous_checkpoint,
    prune_stages,
    record_run,
    run_log,
)
from basketgnn.pipeline.prepared import SAMPLE_MASK, SPLIT_FILE, prepare_into, split_file
from basketgnn.pipeline.schema import AUTO_MODEL, PREVIOUS, EvaluateSpec, in_job_terms, load_job

if TYPE_CHECKING:
    from basketgnn.data.dataset import BasketData
    from basketgnn.data.split import Split
    from basketgnn.pipeline.prepared import SAMPLE_MASK, SPLIT_FILE, prepare_into, split_file
from basketgnn.pipeline.schema import Job

RECOMMENDATION_FILES = ("recommendations.parquet", "recommendations.csv")
EVALUATED_PART = "test"


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
    with exclusive(job.run_dir), run_log(job.run_dir / LOG_FILE) as logger:
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


class _Runner:
    """One run of a job: each stage step says what the stage's key holds and how it computes."""

    def __init__(self, job: Job, console: Console, logger: logging.Logger, progress: bool) -> None:
        self.job = job
        self.console = console
        self.logger = logger
        self.progress = progress
        self.t_start = time.perf_counter()
        self.cache = StageCache(job.run_dir, 5 + len(job.trained), self.say)
        self._data: BasketData | None = None
        self._split: Split | None = None

    @property
    def current(self) -> str:
        """The stage under way, for the messages of a run that stops."""
        return self.cache.current

    def say(self, message: str, style: str | None = None, level: int = logging.INFO) -> None:
        """A line on the console (with the seconds since the start) and in the log."""
        elapsed = time.perf_counter() - self.t_start
        self.console.print(
            f"[{elapsed:6.1f}s] {message}", style=style, markup=False, highlight=False
        )
        self.logger.log(level, message)

    def data(self, prepare: Stage) -> BasketData:
        if self._data is None:
            from basketgnn.data.dataset import BasketData

            self._data = BasketData.load(prepare.dir / "data")
        return self._data

    def split(self, split: Stage, prepare: Stage) -> Split:
        if self._split is None:
            from basketgnn.data.split import load_split

            self._split = load_split(split_file(split.dir), self.data(prepare))
        return self._split

    # -- the job, stage by stage ----------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        job = self.job
        self.say(f"pipeline {job.config_path} -> {job.run_dir}", style="bold")
        if finish_publishing(job.run_dir):
            self.say(
                "  moved into place the rest of the outputs an interrupted run had staged",
                style="yellow",
            )
        prepare = self._prepare_stage()
        split = self._split_stage(prepare)
        fits = {name: self._fit_stage(name, prepare, split) for name in job.trained}
        evaluate = self._evaluate_stage(prepare, split, fits)
        records = json.loads((evaluate.dir / "results.json").read_text())
        self._show_results(records)
        recommend = self._recommend_stage(prepare, split, fits, records)
        report = self.cache.stage(
            "report",
            {"title": job.spec.report.title},
            [prepare, split, *fits.values(), evaluate, recommend],
            lambda d: self._report(d, prepare, split, fits, evaluate, recommend, records),
        )
        return self._finish(prepare, fits, recommend, report)

    def _prepare_stage(self) -> Stage:
        inp = self.job.spec.input.model_dump(exclude={"memory_limit"})  # changes no result
        inp["path"] = str(self.job.input_path)
        files = input_files(self.job.input_path)
        if self.job.items_path is None:
            inp.pop("items")  # the key of a run without a catalogue is as before the option
        else:
            files += input_files(self.job.items_path)
        prepare = self.cache.stage("prepare", inp, [], self._prepare, extra={"files": files})
        self._show_data(prepare.info)
        return prepare

    def _split_stage(self, prepare: Stage) -> Stage:
        spec = self.job.spec
        kind = spec.split.kind
        if kind == "auto":
            kind = "predefined" if prepare.info["has_predefined_split"] else "temporal"
        settings: dict[str, Any] = {"kind": kind}
        if kind == "random":
            settings["seed"] = spec.split.seed  # other kinds ignore it: no needless rerun
        if spec.train.sample_customers is not None:
            settings["sample"] = {
                "customers": spec.train.sample_customers,
                "seed": spec.train.sample_seed,
            }
        split = self.cache.stage(
            "split", settings, [prepare], lambda d: self._make_split(d, prepare, kind)
        )
        self.say(
            f"  {split.info['name']}: "
            + ", ".join(f"{n:,} {p}" for p, n in split.info["sizes"].items())
            + " customers"
        )
        if "sample" in split.info:
            from basketgnn.data.sample import CustomerSample

            self.say("  " + CustomerSample(**split.info["sample"]).describe())
        return split

    def _fit_stage(self, name: str, prepare: Stage, split: Stage) -> Stage:
        warm = self._warm_start_checkpoint(name, prepare)
        extra = None
        if warm is not None:
            extra = {"warm_start": {"checkpoint": str(warm), "sha256": file_sha256(warm)}}
        config = self.job.trained[name]
        fit = self.cache.stage(
            f"fit_{name}",
            # Where training runs is no part of what it computes (as for resume.pt).
            {k: v for k, v in config.dump().items() if k not in ("device", "threads")},
            [split],
            lambda d: self._fit(d, name, prepare, split, warm),
            resumable=True,
            extra=extra,
        )
        self.say(
            f"  best epoch {fit.info['best_epoch']} of {fit.info['epochs_run']}, validation "
            f"mean NDCG {fit.info['best_validation']['mean_ndcg']:.4f}"
        )
        return fit

    def _evaluate_stage(self, prepare: Stage, split: Stage, fits: dict[str, Stage]) -> Stage:
        spec = self.job.spec
        settings: dict[str, Any] = {
            "baselines": [[n, o] for n, o in self.job.baselines], "part": EVALUATED_PART,
            "validation": "criterion/1",
        }  # fmt: skip
        if spec.evaluate.customers is not None or spec.evaluate.held_out:
            settings["sample"] = spec.evaluate.model_dump()  # in the key only when sampling
        return self.cache.stage(
            "evaluate",
            settings,
            [split, *fits.values()],
            lambda d: self._evaluate(d, prepare, split, fits),
        )

    def _recommend_stage(
        self, prepare: Stage, split: Stage, fits: dict[str, Stage], records: list[dict[str, Any]]
    ) -> Stage:
        model, selection = self.job.spec.recommend.model, None
        if model == AUTO_MODEL:
            from basketgnn.workflow import select_by_validation

            model, selection = select_by_validation(records)
            self.say(f"  recommend.model auto: {selection['reason']}")
        settings: dict[str, Any] = {"model": model, "k": self.job.spec.recommend.k}
        if self.job.spec.recommend.reasons:  # absent when off: earlier runs' keys stay valid
            settings["reasons"] = True
        if selection is not None:
            settings["selection"] = selection
        if model in fits:
            deps = [prepare, fits[model]]
        else:
            settings["options"] = dict(self.job.baselines)[model]
            deps = [prepare, split]
        return self.cache.stage(
            "recommend",
            settings,
            deps,
            lambda d: self._recommend(d, prepare, split, fits, model, selection),
        )

    def _finish(
        self, prepare: Stage, fits: dict[str, Stage], recommend: Stage, report: Stage
    ) -> dict[str, Any]:
        """Publish the outputs, record the run, and return the run's summary."""
        job = self.job
        self.cache.current = "(outputs)"
        published = [recommend.dir / f for f in RECOMMENDATION_FILES]
        published += [report.dir / f for f in report.info["files"]]
        publish(job.run_dir, published)
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
        stages = self.cache.records
        seconds = time.perf_counter() - self.t_start
        ran = [s["name"] for s in stages if s["status"] != "cached"]
        self.say(
            f"finished in {seconds:.1f}s ({len(ran)} stage(s) run, "
            f"{len(stages) - len(ran)} cached): {outputs['report']}, {outputs['metrics']}, "
            f"{outputs['recommendations_parquet']} (and .csv)",
            style="bold green",
        )
        return {
            "run_dir": job.run_dir,
            "stages": stages,
            "ran": ran,
            "cached": [s["name"] for s in stages if s["status"] == "cached"],
            "outputs": outputs,
            "seconds": seconds,
        }

    def _warm_start_checkpoint(self, name: str, prepare: Stage) -> Path | None:
        """The checkpoint ``name`` starts from (``train.warm_start``), None: from scratch."""
        given = self.job.warm_start.get(name)
        if given is None:
            return None
        if given != PREVIOUS:
            return Path(given)
        found = previous_checkpoint(self.job.run_dir, name, prepare.output_key)
        if found is None:
            self.say(f"  {name}: no earlier successful run on other data has a checkpoint of it "
                     f"(train.warm_start: {PREVIOUS}): training from scratch")  # fmt: skip
        return found

    def _record_success(self, prepare: Stage, fits: dict[str, Stage]) -> None:
        """This run's line in runs.jsonl, then the pruning that ``keep_runs`` asks for."""
        run_dir, keep_runs = self.job.run_dir, self.job.spec.keep_runs
        record_run(run_dir, prepare, fits, [s["dir"] for s in self.cache.records])
        if keep_runs is not None:
            removed = prune_stages(run_dir, keep_runs)
            if removed:
                self.say(f"  keep_runs {keep_runs}: deleted {len(removed)} stage "
                         f"folder(s) no kept run uses: {', '.join(removed)}")  # fmt: skip

    # -- what the stages compute ----------------------------------------------------------------

    def _prepare(self, folder: Path) -> dict[str, Any]:
        from basketgnn.fingerprint import data_fingerprint

        inp = self.job.spec.input
        path = self.job.input_path
        columns, options = inp.prepare_arguments()
        if not (path.is_file() and path.suffix == ".json") and not (path / "meta.json").is_file():
            self.say(f"  reading {path} with {inp.engine}")
        try:
            data = prepare_into(path, columns, options, folder / "data", inp.memory_limit)
            if inp.items is not None and self.job.items_path is not None:
                from basketgnn.data.catalogue import attach_catalogue

                data = attach_catalogue(data, self.job.items_path, inp.items.id_column or columns.item,
                                        inp.items.columns, inp.items.missing)  # fmt: skip
                data.save_meta(folder / "data")  # adds catalogue.npz; the stage is not done yet
        except UserError as e:
            raise in_job_terms(e, self.job.config_path.name) from None
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

    def _make_split(self, folder: Path, prepare: Stage, kind: str) -> dict[str, Any]:
        from basketgnn import workflow
        from basketgnn.data.split import save_split

        data = self.data(prepare)
        split = workflow.split(data, kind, self.job.spec.split.seed)
        sampled = None
        if (n := self.job.spec.train.sample_customers) is not None:
            from basketgnn.data.sample import sample_split, sampled_customers

            seed = self.job.spec.train.sample_seed
            mask = sampled_customers(data.user_ids, n, seed)
            np.save(folder / SAMPLE_MASK, mask)  # evaluate's held-out customers reuse it
            split, sampled = sample_split(split, data, n, seed, mask)
        save_split(split, data, folder / SPLIT_FILE)
        sizes = {p: len(inst) for p, inst in split.parts.items()}
        info: dict[str, Any] = {"name": split.name, "sizes": sizes}
        return info if sampled is None else {**info, "sample": sampled.as_dict()}

    def _fit(
        self, folder: Path, name: str, prepare: Stage, split: Stage, warm: Path | None = None
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
            recall = r.get("val_recall@10", float("nan"))
            self.say(
                f"  epoch {r['epoch']}/{epochs}: loss {r['train_loss']:.4f}, validation "
                f"mean NDCG {r['val_mean_ndcg']:.4f}, recall@10 {recall:.4f} "
                f"({r['train_s'] + r['validate_s']:.1f}s)" + ("  best" if r["best"] else "")
            )

        # The stamp lets `basketgnn predict/evaluate --checkpoint` find this run's data and split.
        stamp = workflow.data_stamp(prepare.dir / "data", split_file(split.dir))
        entry = workflow.ModelEntry(name, settings, out_dir=folder, warm_start=warm, stamp=stamp)
        outcome = workflow.train(entry, data, sp, progress=self.progress, on_epoch=on_epoch)
        result = outcome.training
        assert result is not None
        if result.warm_start is not None:
            self.say(f"  {result.warm_start.describe()}; epoch 0 is that model")
        if result.left_out_baskets:
            self.say("  " + describe_left_out(result.left_out_baskets))
        for choice in filter(None, (outcome.fusion, outcome.rerank)):  # what validation chose
            self.say("  " + choice["description"])
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

    def _trained(self, name: str, fit: Stage) -> Any:
        from basketgnn.workflow import load_trained

        return load_trained(fit.dir / "best.pt", self.job.trained[name].model.device)

    def _evaluate(
        self, folder: Path, prepare: Stage, split: Stage, fits: dict[str, Stage]
    ) -> dict[str, Any]:
        from basketgnn import workflow

        data, sp = self.data(prepare), self.split(split, prepare)
        sp = self._evaluated_customers(data, sp, split.dir / SAMPLE_MASK)
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

    def _evaluated_customers(self, data: BasketData, sp: Split, mask_file: Path) -> Split:
        """``sp`` with the evaluated part that the ``evaluate`` section asks for (the training
        sample's mask read from the split stage's ``mask_file`` when it wrote one)."""
        ev, train = self.job.spec.evaluate, self.job.spec.train
        trained_on = None
        if ev.held_out and train.sample_customers is not None:
            from basketgnn.data.sample import sampled_customers

            if mask_file.is_file():
                trained_on = np.load(mask_file)
            else:
                trained_on = sampled_customers(data.user_ids, train.sample_customers, train.sample_seed)
        sp = evaluation_split(sp, ev, trained_on)
        if ev.customers is not None or trained_on is not None:
            self.say(
                f"  evaluating on {len(sp[EVALUATED_PART]):,} {EVALUATED_PART} customers"
                + (" outside the training sample" if trained_on is not None else "")
                + (f" (a sample, seed {ev.seed})" if ev.customers is not None else "")
            )
        return sp

    def _show_results(self, records: list[dict[str, Any]]) -> None:
        from basketgnn.results_table import from_records, to_line

        table = from_records(records, ["recall@10", "ndcg@10", "recall@20", "ndcg@20"])
        for i in range(len(records)):
            self.say(f"  {to_line(table, i)}")

    def _recommend(
        self,
        folder: Path,
        prepare: Stage,
        split: Stage,
        fits: dict[str, Stage],
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
            entry = workflow.ModelEntry(name, dict(self.job.baselines)[name])
            model = workflow.train(entry, data, sp).recommender
        # Streamed chunk by chunk into both files from one scoring: memory stays that of a
        # chunk, not of every customer's rows (tens of millions at a million customers).
        k = min(self.job.spec.recommend.k, data.n_items)
        rows = write_recommendation_file(
            model, data, k, [folder / f for f in RECOMMENDATION_FILES], reasons=self.job.spec.recommend.reasons
        )
        self.say(f"  top-{k} by {name} for all {data.n_users:,} customers ({rows:,} rows)")
        info = {"model": name, "k": k, "customers": data.n_users, "rows": rows}
        return info if selection is None else {**info, "selection": selection}

    def _report(
        self,
        folder: Path,
        prepare: Stage,
        split: Stage,
        fits: dict[str, Stage],
        evaluate: Stage,
        recommend: Stage,
        records: list[dict[str, Any]],
    ) -> dict[str, Any]:
        from basketgnn.pipeline.report import metrics_summary, write_report

        rec_model = recommend.info["model"]  # the chosen one when recommend.model is auto
        # The recommending model's training curve when it was trained, else the first's.
        charted = rec_model if rec_model in fits else next(iter(fits), None)
        summary = metrics_summary(
            self.job.spec.report.title, prepare, split, fits, evaluate, recommend, records,
            charted=charted, pool_cap=self.job.spec.neighbours.pool_cap,
            part=EVALUATED_PART, files=RECOMMENDATION_FILES,
        )  # fmt: skip
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


def _finite(metrics: dict[str, float]) -> dict[str, float | None]:
    """Metrics rounded to 6 digits, NaN as None (JSON has no NaN)."""
    return {k: None if math.isnan(v) else round(float(v), 6) for k, v in metrics.items()}
