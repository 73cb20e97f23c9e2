"""The one place that turns a YAML file and command-line overrides into a DNNTSPConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

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
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()
        )
        valid = ", ".join(DNNTSPConfig.model_fields)
        where = f"{path}: " if path is not None else ""
        raise UserError(f"{where}invalid config ({problems}). Valid keys: {valid}.") from None


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
