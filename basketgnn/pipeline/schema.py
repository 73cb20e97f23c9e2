"""The pipeline file: its sections as pydantic models (:class:`PipelineSpec`), and
:func:`load_job`, which reads one, checks it and resolves it into a :class:`Job`.

Unknown keys and bad values are a :class:`~basketgnn.errors.UserError` naming the key
(``input.engine``, ``models.baselines[0]``, ``train.warm_start.sasrec``, ...).
``pipelines/example.yaml`` documents every key at length; the descriptions here are one line.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from basketgnn import registry
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.errors import UserError
from basketgnn.workflow.config import describe_validation_error, load_yaml, resolve_path

if TYPE_CHECKING:
    from basketgnn.workflow.config import Settings

#: ``train.warm_start`` value: the model's checkpoint of the last successful run (on other data).
PREVIOUS = "previous"
#: ``recommend.model`` value that picks the model by validation (``workflow.select_by_validation``).
AUTO_MODEL = "auto"
DEFAULT_BASELINES = ["g-topfreq", "p-topfreq", "tifu-knn"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemsSpec(_Section):
    """An item catalogue joined to the prepared data (``basketgnn prepare --items``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Item catalogue: a CSV or Parquet file, one row per item.")
    id_column: str | None = Field(None, description="Its item id column (null: the log's item column).")
    columns: list[str] | None = Field(None, description="Categorical columns to keep (null: all but the id).")
    missing: Literal["error", "unknown"] = Field(
        "error", description="Items of the log the catalogue lacks: stop, or 'unknown' in every column."
    )


class InputSpec(PrepareOptions):
    """The transaction log and how it is prepared: the options of ``basketgnn prepare``
    (:class:`~basketgnn.data.ingest.PrepareOptions`, declared once) plus where the log is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Transaction log: CSV/Parquet file or folder, or a DNNTSP .json.")
    columns: Columns = Field(default_factory=Columns, description="Column names of the log.")
    engine: Literal["duckdb"] = Field("duckdb", description="The ingestion engine (duckdb only).")
    memory_limit: str | None = Field(
        None, description="Memory limit of the DuckDB ingestion, e.g. '2GB' (null: its default)."
    )
    items: ItemsSpec | None = Field(None, description="An item catalogue (null: none).")

    def prepare_arguments(self) -> tuple[Columns, PrepareOptions]:
        """The columns and options that ``workflow.prepare`` takes for this section."""
        return self.columns, PrepareOptions(**self.model_dump(include=set(PrepareOptions.model_fields)))


#: ``basketgnn prepare`` flags and the ``input`` keys that set the same option.
_JOB_KEYS = {
    "--where": "input.where", "--quantity-col": "input.columns.quantity",
    "--keep-returns": "input.keep_returns", "--max-basket-items": "input.max_basket_items",
    "--time-format": "input.time_format", "--customer-col": "input.columns.customer",
    "--item-col": "input.columns.item", "--basket-col": "input.columns.basket",
    "--time-col": "input.columns.timestamp", "--min-baskets": "input.min_baskets",
    "--max-baskets": "input.max_baskets", "--min-item-baskets": "input.min_item_baskets",
    "--last-n": "input.last_n", "--items-missing": "input.items.missing",
    "--items-id-col": "input.items.id_column", "--items-cols": "input.items.columns",
    "--items": "input.items.path",
}  # fmt: skip


def in_job_terms(e: UserError, config_name: str) -> UserError:
    """An ingestion error with prepare's flags renamed to the job file's keys."""
    text = str(e)
    if "on-bad-rows" in text:
        text += f" In {config_name}, `on_bad_rows: skip` under `input:` skips them."
    for flag, key in _JOB_KEYS.items():
        text = re.sub(re.escape(flag) + r"\b", key, text)
    return UserError(text)


class SplitSpec(_Section):
    kind: Literal["auto", "temporal", "random", "predefined"] = Field(
        "auto", description="auto: predefined for DNNTSP .json input, else temporal."
    )
    seed: int = Field(0, description="Seed of the random split.")


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
        description="The recommending model (registry name), or auto: the best on validation.",
    )
    threads: int | None = Field(
        None, ge=1, description="CPU threads for scoring a trained model (null: its own threads)."
    )
    reasons: bool = Field(
        False,
        description="Add a column `reasons`: each row's reasons as JSON text (its score's parts, "
        "the customer's repeat evidence, the similar customers, the model's attention). Slower.",
    )


class EvaluateSpec(_Section):
    customers: int | None = Field(
        None,
        ge=1,
        description="Evaluate on a seeded sample of this many test customers (null: all).",
    )
    seed: int = Field(0, description="Seed of that sample.")
    held_out: bool = Field(
        False, description="Evaluate only customers outside the training sample."
    )


class TrainSpec(_Section):
    warm_start: str | dict[str, str] | None = Field(
        None,
        description="previous, a best.pt path, or {model: previous | path}; null: from scratch.",
    )
    sample_customers: int | None = Field(
        None,
        ge=1,
        description="Fit every model on a seeded sample of this many customers (null: all).",
    )
    sample_seed: int = Field(0, description="Seed of the customer sample.")


class NeighboursSpec(_Section):
    pool_cap: int | None = Field(
        None, ge=1, description="Most customers in the TIFU-KNN neighbour pool (null: its default)."
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
        None, ge=1, description="Keep only the stage folders of the last N successful runs."
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
    items_path: Path | None = None
    """The item catalogue (``input.items.path``), resolved; None without one."""


def load_job(config_path: str | Path) -> Job:
    """Read and check a pipeline YAML file.

    Unknown keys and bad values are a :class:`UserError` naming the key (``input.engine``, ...).
    """
    config_path = Path(config_path)
    spec = _read_spec(config_path)
    base = config_path.resolve().parent
    baselines = _baselines(config_path, spec.models.baselines)
    trained = _trained_models(config_path, spec.models, {b for b, _ in baselines})
    baselines = _with_pool_cap(config_path, baselines, spec.neighbours.pool_cap)
    trained = _fusion_pool_cap(spec, trained)
    warm_start = _warm_start_by_model(config_path, base, spec.train.warm_start, list(trained))
    _check_choices(config_path, spec, [b for b, _ in baselines] + list(trained))
    return Job(
        config_path=config_path.resolve(),
        spec=spec,
        run_dir=resolve_path(base, spec.run_dir),
        input_path=resolve_path(base, spec.input.path),
        baselines=baselines,
        trained=trained,
        warm_start=warm_start,
        items_path=resolve_path(base, spec.input.items.path) if spec.input.items else None,
    )


def _read_spec(config_path: Path) -> PipelineSpec:
    """The file's sections, checked against :class:`PipelineSpec`."""
    raw = load_yaml(
        config_path,
        "the pipeline file (a mapping with run_dir, input, split, models, recommend and report; "
        "see pipelines/example.yaml)",
    )
    try:
        return PipelineSpec(**raw)
    except ValidationError as e:
        raise UserError(
            f"{config_path}: {describe_validation_error(e, PipelineSpec)}. "
            "See pipelines/example.yaml."
        ) from None


def _baselines(
    config_path: Path, entries: list[str | dict[str, dict[str, Any]]]
) -> list[tuple[str, dict[str, Any]]]:
    """``models.baselines`` as (name, options), each checked by building the baseline."""
    from basketgnn.registry import make_baseline

    baselines: list[tuple[str, dict[str, Any]]] = []
    for i, entry in enumerate(entries):
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
    return baselines


def _trained_models(
    config_path: Path, models: ModelsSpec, baselines: set[str]
) -> dict[str, Settings]:
    """The trained models' settings (registry name -> settings), switched-off ones left out."""
    from basketgnn.workflow.config import load_config

    trained: dict[str, Settings] = {}
    for name, options in models.trained().items():
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
        if name in baselines:
            raise UserError(f"{config_path}: models lists {name!r} twice.")
    return trained


def _with_pool_cap(
    config_path: Path, baselines: list[tuple[str, dict[str, Any]]], cap: int | None
) -> list[tuple[str, dict[str, Any]]]:
    """``neighbours.pool_cap`` given to TIFU-KNN (its ``pool_cap`` option), where it has one."""
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


def _fusion_pool_cap(spec: PipelineSpec, trained: dict[str, Settings]) -> dict[str, Settings]:
    """The trained models' TIFU fusion searches the pool of ``neighbours.pool_cap`` too, unless
    the model's own options set ``neighbour_pool_cap``."""
    cap = spec.neighbours.pool_cap
    if cap is None:
        return trained
    given = spec.models.trained()
    return {
        name: config if "neighbour_pool_cap" in (given.get(name) or {})
        else config.update(neighbour_pool_cap=cap)
        for name, config in trained.items()
    }  # fmt: skip


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


def _check_choices(config_path: Path, spec: PipelineSpec, models: list[str]) -> None:
    """The checks across sections: held-out evaluation needs a training sample, the job names a
    model, and ``recommend.model`` is one of them (or auto)."""
    if spec.evaluate.held_out and spec.train.sample_customers is None:
        raise UserError(
            f"{config_path}: evaluate.held_out needs train.sample_customers (customers are held "
            "out of a training sample); set it, or held_out: false."
        )
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
