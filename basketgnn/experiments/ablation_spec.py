"""The ablation spec: one YAML file read into a validated :class:`Grid` of planned :class:`Run`\\ s.

A spec names datasets, the trained model (any neural model of :mod:`basketgnn.registry`), seeds,
shared config overrides (``base``), named variants of them and baselines. :func:`load_spec`
checks all of it before anything is trained and plans the runs in the order they run: per
dataset, the baselines first (quick, they give a partial table its reference lines), then every
variant seed by seed (a grid stopped early has every variant at the first seeds).

A run's key is ``(dataset, variant, seed, config_hash, data_hash)``:

- ``config_hash`` (:func:`basketgnn.fingerprint.settings_hash`) covers the variant's settings and the split spec, but
  not the seed (its own part of the key, so that all seeds of one setting share a hash, which is
  how the table groups them) nor ``threads`` / ``device``, which only decide how fast a run
  goes;
- ``data_hash`` (:func:`dataset_hash`) is the dataset's content on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from basketgnn import registry
from basketgnn.errors import UserError
from basketgnn.fingerprint import settings_hash, source_fingerprint
from basketgnn.metrics import KS
from basketgnn.workflow.config import (
    Settings,
    describe_validation_error,
    load_config,
    load_yaml,
    resolve_path,
)

RESULTS_FILE = "results.jsonl"
TABLE_FILE = "table.md"
CHART_FILE = "chart.png"

#: Every metric name an evaluation reports (see basketgnn.metrics.ranking_metrics).
METRIC_NAMES: tuple[str, ...] = tuple(
    f"{prefix}{m}@{k}"
    for prefix in ("", "repeat_", "explore_")
    for m in ("recall", "ndcg", "phr")
    for k in KS
)
DEFAULT_TABLE_METRICS: tuple[str, ...] = (
    "recall@10",
    "ndcg@10",
    "phr@10",
    "recall@20",
    "ndcg@20",
    "phr@20",
)

# Left out of config_hash: the seed is a separate part of the run key; threads and device
# change how fast a run goes, not what it measures.
_UNHASHED_KEYS = ("seed", "threads", "device")


class AblationSpec(BaseModel):
    """The YAML file, as written (paths not yet resolved)."""

    model_config = ConfigDict(extra="forbid")

    out: str = Field(description="Folder for results.jsonl, table.md and chart.png.")
    datasets: dict[str, str] = Field(
        min_length=1, description="name: path of a prepared dataset folder or a DNNTSP .json."
    )
    model: str = Field(
        registry.DEFAULT_MODEL,
        description="Registry name of the trained model whose variants are compared.",
    )
    seeds: list[int] = Field([0], min_length=1, description="Seeds of every variant.")
    split: str = Field("auto", description="Split spec of make_split, or a split .json file.")
    base: dict[str, Any] = Field(
        default_factory=dict, description="Config overrides of `model` shared by every variant."
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="name: config overrides on top of base; `model: NAME` in a variant trains "
        "that registered model instead (base then does not apply).",
    )
    baselines: list[str] | dict[str, dict[str, Any]] = Field(
        default_factory=list,
        description="Baseline names, or name: constructor options; run once per dataset.",
    )
    metrics_in_table: list[str] = Field(
        list(DEFAULT_TABLE_METRICS), min_length=1, description="Columns of table and chart."
    )

    @field_validator("base", mode="before")
    @classmethod
    def _null_base(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("variants", "baselines", mode="before")
    @classmethod
    def _null_options(cls, value: Any) -> Any:
        # `full:` with nothing after it is YAML null; it means "no overrides".
        if isinstance(value, dict):
            return {k: ({} if v is None else v) for k, v in value.items()}
        return [] if value is None else value

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds repeat a value: {seeds}")
        return seeds

    @field_validator("metrics_in_table")
    @classmethod
    def _known_metrics(cls, metrics: list[str]) -> list[str]:
        unknown = [m for m in metrics if m not in METRIC_NAMES]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; valid: {', '.join(METRIC_NAMES)}")
        return metrics

    def baseline_options(self) -> dict[str, dict[str, Any]]:
        """Every baseline with its constructor options ({} when given as a bare name)."""
        if isinstance(self.baselines, dict):
            return self.baselines
        return {name: {} for name in self.baselines}


RunKey = tuple[str, str, int | None, str, str | None]
"""(dataset, variant, seed, config_hash, data_hash) of a run or a results line."""


@dataclass(frozen=True)
class Run:
    """One planned run of the grid."""

    dataset: str
    variant: str
    kind: str
    """The trained model's registry name, or "baseline"."""
    seed: int | None
    config: dict[str, Any]
    """A trained model: its full effective config. Baseline: its constructor options."""
    config_hash: str
    data_hash: str
    """The dataset's content (:func:`dataset_hash`)."""

    @property
    def trained(self) -> bool:
        return self.kind != "baseline"

    @property
    def key(self) -> RunKey:
        return (self.dataset, self.variant, self.seed, self.config_hash, self.data_hash)


@dataclass(frozen=True)
class Grid:
    """A validated spec with resolved paths and the planned runs, in the order they run."""

    spec_path: Path
    spec: AblationSpec
    out: Path
    dataset_paths: dict[str, Path]
    split: str
    runs: list[Run]

    @property
    def results_path(self) -> Path:
        return self.out / RESULTS_FILE

    @property
    def table_path(self) -> Path:
        return self.out / TABLE_FILE

    @property
    def chart_path(self) -> Path:
        return self.out / CHART_FILE


def load_spec(spec_path: str | Path) -> Grid:
    """Read and validate an ablation YAML; relative paths in it are relative to its folder.

    Everything a user can get wrong (unknown keys, bad overrides, unknown models or baselines,
    missing dataset files) is a :class:`UserError` naming it, raised before anything is trained.
    """
    spec_path = Path(spec_path)
    raw = load_yaml(spec_path, "the ablation spec (a mapping: out, datasets, ...)")
    try:
        spec = AblationSpec(**raw)
    except ValidationError as e:
        raise UserError(f"{spec_path}: {describe_validation_error(e, AblationSpec)}.") from None
    root = spec_path.resolve().parent
    dataset_paths = _dataset_paths(spec_path, spec, root)
    split = _split_path(spec_path, spec, root)
    baselines = _checked_baselines(spec_path, spec)
    configs = _variant_configs(spec_path, spec)
    if not configs and not baselines:
        raise UserError(f"{spec_path}: no variants and no baselines: nothing to run.")
    data_hashes = {
        name: dataset_hash(path, spec_path, name) for name, path in dataset_paths.items()
    }
    runs = [
        run
        for dataset in spec.datasets
        for run in _plan_dataset(dataset, data_hashes[dataset], spec, baselines, configs)
    ]
    return Grid(spec_path, spec, resolve_path(root, spec.out), dataset_paths, split, runs)


def _dataset_paths(spec_path: Path, spec: AblationSpec, root: Path) -> dict[str, Path]:
    paths = {}
    for name, rel in spec.datasets.items():
        path = resolve_path(root, rel)
        if not path.exists():
            raise UserError(
                f"{spec_path}: dataset {name!r}: {rel} not found (looked for {path}; relative "
                "paths are relative to the spec file's folder)."
            )
        paths[name] = path
    return paths


def _split_path(spec_path: Path, spec: AblationSpec, root: Path) -> str:
    """The split spec as make_split takes it: a split kind, or a split file's resolved path."""
    if not spec.split.endswith(".json"):
        return spec.split
    split = str(resolve_path(root, spec.split))
    if not Path(split).is_file():
        raise UserError(f"{spec_path}: split file {spec.split} not found (looked for {split}).")
    return split


def _checked_baselines(spec_path: Path, spec: AblationSpec) -> dict[str, dict[str, Any]]:
    """The spec's baselines, each known, with options its constructor takes, and no name shared
    with a variant."""
    baselines = spec.baseline_options()
    for name, options in baselines.items():
        registry.check_name(name, f"{spec_path}: baselines: ", "baseline")
        try:
            registry.make_baseline(name, **options)  # fail now, not after hours of training
        except UserError as e:
            raise UserError(f"{spec_path}: baselines: {e}") from None
    clash = sorted(set(baselines) & set(spec.variants))
    if clash:
        raise UserError(f"{spec_path}: {clash} name both a variant and a baseline; rename one.")
    return baselines


def _variant_configs(spec_path: Path, spec: AblationSpec) -> dict[str, tuple[str, Settings]]:
    """Every variant's trained model and settings (its overrides on top of ``base``)."""
    registry.check_name(spec.model, f"{spec_path}: model: ", "neural")
    # base alone first, so that a bad key there is reported as base's, not the first variant's.
    _variant_config(spec_path, {}, "base", spec.base, spec.model)
    configs: dict[str, tuple[str, Settings]] = {}
    for name, options in spec.variants.items():
        model = options.get("model", spec.model)
        if not isinstance(model, str):
            raise UserError(f"{spec_path}: variant {name!r}: model must be a registry name.")
        registry.check_name(model, f"{spec_path}: variant {name!r}: model: ", "neural")
        overrides = {k: v for k, v in options.items() if k != "model"}
        base = spec.base if model == spec.model else {}
        configs[name] = (model, _variant_config(spec_path, base, name, overrides, model))
    return configs


def _variant_config(
    spec_path: Path, base: dict[str, Any], name: str, overrides: dict[str, Any], model: str
) -> Settings:
    where = f"{spec_path}: " + ("base" if name == "base" else f"variant {name!r}")
    if "seed" in overrides:
        raise UserError(f"{where}: 'seed' is set per run by `seeds`; remove it here.")
    values = {**base, **overrides}
    fields = registry.config_class(model).model_fields
    for key, value in values.items():
        field = fields.get(key)
        # PyYAML reads a bare off/no/yes as a boolean; `gate: off` would otherwise fail obscurely.
        if field is not None and isinstance(value, bool) and field.annotation is not bool:
            raise UserError(
                f'{where}: {key}: {value!r} is a YAML boolean; quote the value (e.g. {key}: "off").'
            )
    try:
        return load_config(None, model=model, **values)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def _plan_dataset(
    dataset: str,
    data_hash: str,
    spec: AblationSpec,
    baselines: dict[str, dict[str, Any]],
    configs: dict[str, tuple[str, Settings]],
) -> list[Run]:
    """One dataset's runs: the baselines, then every variant seed-major."""
    runs = []
    for name, options in baselines.items():
        config_hash = settings_hash({"baseline": name, "options": options, "split": spec.split}, 16)
        runs.append(Run(dataset, name, "baseline", None, options, config_hash, data_hash))
    for seed in spec.seeds:
        for name, (model, settings) in configs.items():
            full = settings.update(seed=seed).dump()
            hashed = {k: v for k, v in full.items() if k not in _UNHASHED_KEYS}
            config_hash = settings_hash({model: hashed, "split": spec.split}, 16)
            runs.append(Run(dataset, name, model, seed, full, config_hash, data_hash))
    return runs


def dataset_hash(path: Path, spec_path: Path | None = None, name: str | None = None) -> str:
    """The dataset's content on disk (:func:`basketgnn.fingerprint.source_fingerprint`);
    ``spec_path`` and ``name`` only serve the error message."""
    where = f"{spec_path}: dataset {name!r}: " if spec_path is not None else ""
    return source_fingerprint(path, where)
