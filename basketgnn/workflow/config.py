"""The one YAML loader, and the one place that turns a YAML file and command-line overrides into
a model's settings (any registered neural model; ``dnntsp`` by default): the model's config and
the options of the fusion chosen after training, written side by side in one file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from basketgnn import registry
from basketgnn.errors import UserError
from basketgnn.models.options import TrainOptions
from basketgnn.recommenders.fused import FusionOptions
from basketgnn.registry import DEFAULT_MODEL, config_class

#: Keys of the neighbour add-on, which the fusion with TIFU-KNN replaces: refused with that fix.
REMOVED_KEYS = {
    name: "an option of the neighbour add-on, which the fusion with TIFU-KNN (fusion: tifu) replaces"
    for name in ("neighbour_weight", "neighbour_k", "neighbour_top")
}


def preset_values(model: str, preset: str) -> dict[str, Any]:
    """The options of ``model``'s ``preset`` ({} for ``default``); a :class:`UserError` naming
    the presets ``model`` has otherwise."""
    if preset == "default":
        return {}
    presets = registry.get_spec(model).presets if registry.is_neural(model) else {}
    if preset not in presets:
        valid = ", ".join(["default", *presets])
        raise UserError(f"--preset: {model} has no preset {preset!r} (choose one of {valid}).")
    return dict(presets[preset])


def parse_sets(sets: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` overrides (``--set``), each value read as YAML (``seed=3``, ``fusion=off``)."""
    values: dict[str, Any] = {}
    for item in sets or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--set {item!r}: write KEY=VALUE, e.g. --set seed=3.")
        try:
            values[key.strip()] = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError as e:
            raise UserError(f"--set {item!r}: the value is not YAML ({e}).") from None
    return values


@dataclass(frozen=True)
class Settings:
    """A neural model's settings: its config (the model's and the engine's options) and the
    fusion options that act after training."""

    model: TrainOptions
    fusion: FusionOptions = field(default_factory=FusionOptions)

    def update(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (keys of either part) applied, checked."""
        fusion_keys = {k: v for k, v in changes.items() if k in FusionOptions.model_fields}
        model_keys = {k: v for k, v in changes.items() if k not in fusion_keys}
        return Settings(
            type(self.model)(**{**self.model.model_dump(), **model_keys}),
            FusionOptions(**{**self.fusion.model_dump(exclude_unset=True), **fusion_keys}),
        )

    def dump(self) -> dict[str, Any]:
        """Both parts as one flat mapping, as a config file writes them."""
        return {**self.model.model_dump(), **self.fusion.model_dump()}


def load_yaml(path: str | Path, what: str, *, allow_empty: bool = False) -> dict[str, Any]:
    """A YAML file that must hold a mapping (a config, a pipeline, an ablation spec).

    An unreadable file, bad YAML or anything but a mapping is a :class:`UserError` naming the
    file and ``what`` it should be (e.g. "the config", "the pipeline file").
    """
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{path}: cannot read {what} ({e}).") from None
    if loaded is None and allow_empty:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(f"{path}: {what} must be a mapping of key: value.")
    return loaded


def load_config(
    path: str | Path | None = None, *, model: str = DEFAULT_MODEL, preset: str = "default", **overrides: Any
) -> Settings:
    """``model``'s settings: defaults, then the ``preset``'s keys (its model's ``ModelSpec.presets``), then the
    YAML file's, then non-None ``overrides``.

    Unknown keys and bad values are a :class:`UserError` naming the key and the valid ones.
    """
    values: dict[str, Any] = preset_values(model, preset)
    if path is not None:
        path = Path(path)
        values.update(load_yaml(path, "the config", allow_empty=True))
    values.update({k: v for k, v in overrides.items() if v is not None})
    return settings_from(values, model, f"{path}: " if path is not None else "")


def settings_from(values: dict[str, Any], model: str = DEFAULT_MODEL, where: str = "") -> Settings:
    """``model``'s settings from one flat mapping of options (a config file's keys)."""
    config_cls = config_class(model)
    removed = sorted(k for k in values if k in REMOVED_KEYS)
    if removed:
        raise UserError(
            f"{where}invalid config ({', '.join(removed)}: {REMOVED_KEYS[removed[0]]}; delete "
            f"{'it' if len(removed) == 1 else 'them'})."
        )
    try:
        rest, fusion = FusionOptions.split(values)
        return Settings(config_cls(**rest), fusion)
    except ValidationError as e:
        checking = FusionOptions if e.title == FusionOptions.__name__ else config_cls
        problems = describe_validation_error(e, checking)
        if checking is config_cls:  # an unknown key: the fusion's keys are valid too
            fusion_keys = ", ".join(FusionOptions.model_fields)
            problems = re.sub(r"unknown key \(valid: ([^)]*)\)", rf"unknown key (valid: \1, {fusion_keys})", problems)
        raise UserError(f"{where}invalid config ({problems}).") from None


# The tags pydantic puts in an error's location for the member of a union it tried ("str",
# "list[str]", "function-after[...]"); a YAML key never looks like one.
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "none"})


def describe_validation_error(error: ValidationError, model: type[BaseModel]) -> str:
    """Every problem of a pydantic ``error`` on ``model``'s input (a YAML file) as
    ``key.path: problem``, joined by "; " (no final period).

    ``key.path`` is the key as written in the file (list positions as ``[i]``, union member tags
    left out). An unknown key lists the valid keys at its level, a missing one says it is
    required, and any other problem gives pydantic's reason and the value found.
    """
    problems = []
    for err in error.errors():
        loc = [
            part
            for part in err["loc"]
            if not (isinstance(part, str) and ("[" in part or part in _UNION_TAGS))
        ]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        if err["type"] == "extra_forbidden":
            valid = _valid_keys(model, loc[:-1])
            problem = "unknown key" + (f" (valid: {', '.join(valid)})" if valid else "")
        elif err["type"] == "missing":
            problem = "required key missing"
        else:
            problem = err["msg"].removeprefix("Value error, ")
            if loc and err["type"] != "value_error":  # a validator's own message shows the value
                shown = repr(err.get("input"))
                problem += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
        problems.append(f"{where}: {problem}" if where else problem)
    return "; ".join(dict.fromkeys(problems))


def _valid_keys(model: type[BaseModel], loc: list[str | int]) -> list[str]:
    """The keys of the section of ``model`` at ``loc`` ([] when it is not a model's section)."""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def config_reference(model: str = DEFAULT_MODEL) -> str:
    """Every option of ``model`` with its default and description, as commented YAML: the
    model's own options, the engine's training options, then the fusion's."""
    fields = config_class(model).model_fields
    # The model's own options first, then the engine's training options.
    order = [n for n in fields if n not in TrainOptions.model_fields] + [
        n for n in fields if n in TrainOptions.model_fields
    ]
    lines = []
    for name, f in [(n, fields[n]) for n in order] + list(FusionOptions.model_fields.items()):
        lines.append(f"# {f.description}")
        lines.append(f"{name}: {yaml.safe_dump(f.default).strip().removesuffix('...').strip()}")
    return "\n".join(lines) + "\n"


def resolve_path(base: Path, path: str) -> Path:
    """``path`` as written in a YAML file: absolute, or relative to the file's folder ``base``."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p).resolve()
