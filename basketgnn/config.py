"""The one YAML loader, and the one place that turns a YAML file and command-line overrides into
a model's config (any registered neural model; ``dnntsp`` by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from basketgnn.engine.options import TrainOptions
from basketgnn.errors import UserError
from basketgnn.registry import DEFAULT_MODEL, config_class


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
    path: str | Path | None = None, *, model: str = DEFAULT_MODEL, **overrides: Any
) -> TrainOptions:
    """``model``'s config: defaults, then the YAML file's keys, then non-None ``overrides``.

    Unknown keys and bad values are a :class:`UserError` naming the key and the valid ones.
    """
    config_cls = config_class(model)
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        values.update(load_yaml(path, "the config", allow_empty=True))
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return config_cls(**values)
    except ValidationError as e:
        where = f"{path}: " if path is not None else ""
        problems = describe_validation_error(e, config_cls)
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
    """Every option of ``model`` with its default and description, as commented YAML."""
    fields = config_class(model).model_fields
    # The model's own options first, then the engine's training options.
    order = [n for n in fields if n not in TrainOptions.model_fields] + [
        n for n in fields if n in TrainOptions.model_fields
    ]
    lines = []
    for name, f in ((n, fields[n]) for n in order):
        lines.append(f"# {f.description}")
        lines.append(f"{name}: {yaml.safe_dump(f.default).strip().removesuffix('...').strip()}")
    return "\n".join(lines) + "\n"


def resolve_path(base: Path, path: str) -> Path:
    """``path`` as written in a YAML file: absolute, or relative to the file's folder ``base``."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p).resolve()
