"""A checkpoint is one model-agnostic file: a format version, the model name (a registry name),
its config, weights, the item id mapping, extras (best epoch, validation metrics, data
fingerprint, where the data came from) and named sections that layers above the engine add
(the fusion chosen after training is one).

A file of another format version stops with a :class:`UserError` saying to train again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pydantic import ValidationError
from torch import nn

from basketgnn.errors import UserError
from basketgnn.io_utils import atomic_path
from basketgnn.models.options import TrainOptions

if TYPE_CHECKING:
    from basketgnn.models.spec import ModelSpec

CHECKPOINT_FORMAT = "basketgnn-checkpoint/3"


@dataclass
class Checkpoint:
    """A loaded checkpoint: the module in eval mode and everything stored beside it."""

    model_name: str
    spec: ModelSpec
    module: nn.Module
    config: TrainOptions
    item_ids: np.ndarray
    extras: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(
    path: str | Path,
    model_name: str,
    module: nn.Module,
    config: TrainOptions,
    item_ids: np.ndarray,
    extras: dict[str, Any],
) -> None:
    """Write the checkpoint atomically (a crash never leaves a half-written file)."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "model": model_name,
        "config": config.model_dump(),
        "num_items": len(item_ids),
        "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()},
        "item_ids": [str(i) for i in item_ids.tolist()],
        "extras": extras,
        "sections": {},
    }
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def read_state(path: Path) -> dict[str, Any]:
    """The raw checkpoint dict, checked to be one of this format."""
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint file. Train one with `basketgnn train`.")
    try:
        # Always onto the CPU first: a GPU-trained checkpoint must load on any machine.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
        raise UserError(f"{path}: not a basketgnn checkpoint ({type(e).__name__}).") from None
    if not isinstance(state, dict) or not str(state.get("format", "")).startswith("basketgnn-"):
        raise UserError(
            f"{path}: not a basketgnn checkpoint (format {CHECKPOINT_FORMAT}); train one with "
            "`basketgnn train`."
        )
    if state["format"] != CHECKPOINT_FORMAT:
        raise UserError(
            f"{path}: a checkpoint of format {state['format']}, written by another basketgnn "
            f"version; this one reads {CHECKPOINT_FORMAT}. Train the model again with "
            "`basketgnn train` (or the pipeline)."
        )
    return state


def load_checkpoint(path: str | Path, device: str = "cpu") -> Checkpoint:
    """Load any model's checkpoint (its model found by name in the registry)."""
    from basketgnn.registry import get_spec

    path = Path(path)
    state = read_state(path)
    spec = get_spec(state["model"], where=f"{path}: ")
    try:
        spec.config_cls(device=device)
    except ValidationError as e:
        raise UserError(f"device {device!r}: {e.errors()[0]['msg']}") from None
    try:
        config = spec.config_cls(**state["config"]).model_copy(update={"device": device})
        module = spec.build(state["num_items"], config)
        module.load_state_dict(state["state_dict"])
    except Exception as e:  # noqa: BLE001 - a checkpoint of another version or model
        raise UserError(
            f"{path}: written by an incompatible basketgnn version ({type(e).__name__}); "
            "train it again."
        ) from None
    module.to(device).eval()
    return Checkpoint(
        model_name=state["model"],
        spec=spec,
        module=module,
        config=config,
        item_ids=np.asarray(state["item_ids"]),
        extras=dict(state.get("extras") or {}),
        sections=dict(state.get("sections") or {}),
    )


def add_extras(path: str | Path, **extras: Any) -> None:
    """Add (or replace) entries of the checkpoint's extras; rewrites the file atomically."""
    state = read_state(Path(path))
    state["extras"].update(extras)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def set_section(path: str | Path, name: str, section: Any, **extras: Any) -> None:
    """Store ``section`` as the checkpoint's section ``name`` (replacing an earlier one) and add
    ``extras`` to its extras, in one atomic rewrite of the file."""
    state = read_state(Path(path))
    state["sections"][name] = section
    state["extras"].update(extras)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
