"""The one place that turns a YAML file and command-line overrides into a DNNTSPConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from basketgnn.errors import UserError
from basketgnn.models.dnntsp import DNNTSPConfig


def load_config(path: str | Path | None = None, **overrides: Any) -> DNNTSPConfig:
    """Defaults, then the YAML file's keys, then non-None ``overrides``.

    Unknown keys and bad values are a :class:`UserError` naming the key and the valid ones.
    """
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise UserError(f"{path}: cannot read the config ({e}).") from None
        if not isinstance(loaded, dict):
            raise UserError(f"{path}: the config must be a mapping of option: value.")
        values.update(loaded)
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return DNNTSPConfig(**values)
    except ValidationError as e:
        where = f"{path}: " if path is not None else ""
        problems = describe_validation_error(e, DNNTSPConfig)
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


def config_reference() -> str:
    """Every option with its default and description, as commented YAML."""
    lines = []
    for name, f in DNNTSPConfig.model_fields.items():
        lines.append(f"# {f.description}")
        lines.append(f"{name}: {yaml.safe_dump(f.default).strip().removesuffix('...').strip()}")
    return "\n".join(lines) + "\n"


def resolve_path(base: Path, path: str) -> Path:
    """``path`` as written in a YAML file: absolute, or relative to the file's folder ``base``."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p).resolve()
