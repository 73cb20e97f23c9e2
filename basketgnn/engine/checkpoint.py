"""A checkpoint is one model-agnostic file: format, model name (a registry name), config,
weights, the item id mapping and extras (best epoch, validation metrics, data fingerprint, the
ranking add-on's choice and state, where the data came from).

Checkpoints of format ``basketgnn-dnntsp-checkpoint/1`` (DNNTSP before the engine held several
models) load as model ``dnntsp``; their top-level keys become the extras, their ``neighbours``
(or, from the fusion branch's format-1 files, ``fusion``) state the add-on.

A stored config without the ``fusion`` option was trained before it existed, when the add-on
was the neighbour term: it loads as ``fusion: neighbours`` (``off`` with neighbour weight 0),
so its options and ranking read as they were. A stored config without ``transitions`` loads
with ``transitions: false``: its fusion was chosen before item transitions existed. A DNNTSP
config without ``train_history_items`` loads with 0: it was trained on whole windows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pydantic import ValidationError
from torch import nn

from basketgnn.engine.addons import RankingAddOn, addon_from_state, wants_addon
from basketgnn.engine.options import TrainOptions
from basketgnn.errors import UserError
from basketgnn.io_utils import atomic_path

if TYPE_CHECKING:
    from basketgnn.engine.spec import ModelSpec

CHECKPOINT_FORMAT = "basketgnn-checkpoint/2"
#: Written by basketgnn before the generic engine: DNNTSP only, extras at the top level.
LEGACY_DNNTSP_FORMAT = "basketgnn-dnntsp-checkpoint/1"
_LEGACY_CORE = ("format", "config", "num_items", "state_dict", "item_ids", "neighbours", "fusion")


@dataclass
class Checkpoint:
    """A loaded checkpoint: the module in eval mode and everything stored beside it."""

    model_name: str
    spec: ModelSpec
    module: nn.Module
    config: TrainOptions
    item_ids: np.ndarray
    extras: dict[str, Any]
    addon: RankingAddOn | None


def save_checkpoint(
    path: str | Path,
    model_name: str,
    module: nn.Module,
    config: TrainOptions,
    item_ids: np.ndarray,
    extras: dict[str, Any],
    addon: RankingAddOn | None = None,
) -> None:
    """Write the checkpoint atomically (a crash never leaves a half-written file)."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "model": model_name,
        "config": config.model_dump(),
        "num_items": len(item_ids),
        "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()},
        "item_ids": [str(i) for i in item_ids.tolist()],
        "addon": addon.state() if addon is not None else None,
        "extras": extras,
    }
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def read_state(path: Path) -> dict[str, Any]:
    """The raw checkpoint dict (current format; legacy files converted), checked to be one."""
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint file. Train one with `basketgnn train`.")
    try:
        # Always onto the CPU first: a GPU-trained checkpoint must load on any machine.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
        raise UserError(f"{path}: not a basketgnn checkpoint ({type(e).__name__}).") from None
    if not isinstance(state, dict) or state.get("format") not in (CHECKPOINT_FORMAT, LEGACY_DNNTSP_FORMAT):
        raise UserError(
            f"{path}: not a basketgnn checkpoint (format {CHECKPOINT_FORMAT}); train one with "
            "`basketgnn train`."
        )
    if state["format"] == LEGACY_DNNTSP_FORMAT:
        state = {
            "format": CHECKPOINT_FORMAT,
            "model": "dnntsp",
            "config": state["config"],
            "num_items": state["num_items"],
            "state_dict": state["state_dict"],
            "item_ids": state["item_ids"],
            "addon": _legacy_addon(state),
            "extras": {
                **{k: v for k, v in state.items() if k not in _LEGACY_CORE},
                # The legacy name of the add-on choice.
                **({"addon_choice": state["neighbour_choice"]} if "neighbour_choice" in state else {}),
            },
        }
        state["extras"].pop("neighbour_choice", None)
    return state


def _legacy_addon(state: dict[str, Any]) -> dict[str, Any] | None:
    fusion = state.get("fusion")
    if fusion is not None and fusion.get("weight", 0) > 0:
        return fusion
    return state.get("neighbours")


def config_as_trained(config: dict[str, Any], model: str = "") -> dict[str, Any]:
    """The stored config with ``fusion`` as it meant when written (module docstring),
    ``transitions`` off when it was written before item transitions existed (its fusion never
    tried them), and DNNTSP's ``train_history_items`` off when written before that cap existed
    (the model was trained on uncapped windows)."""
    if "transitions" not in config:
        config = {**config, "transitions": False}
    if model == "dnntsp" and "train_history_items" not in config:
        # Before the cap: 0. For a few hours of 2026-11-25 it was written as max_history_items.
        cap = config.get("max_history_items", 0)
        config = {k: v for k, v in config.items() if k != "max_history_items"}
        config["train_history_items"] = cap
    if "fusion" in config:
        return config
    return {**config, "fusion": "off" if config.get("neighbour_weight", "auto") == 0 else "neighbours"}


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
        config = spec.config_cls(**config_as_trained(state["config"], state["model"])).model_copy(update={"device": device})
        module = spec.build(state["num_items"], config)
        module.load_state_dict(state["state_dict"])
        addon = addon_from_state(state.get("addon"))
    except Exception as e:  # noqa: BLE001 - a checkpoint of another version or model
        raise UserError(
            f"{path}: written by an incompatible basketgnn version ({type(e).__name__}); "
            "train it again."
        ) from None
    extras = dict(state.get("extras") or {})
    if wants_addon(config) and "addon_choice" not in extras:
        warnings.warn(
            f"{path}: the run stopped before choosing its ranking add-on (fusion / neighbour "
            "weight); this checkpoint ranks by the model alone. Rerun the same `basketgnn train` "
            "to finish it.",
            stacklevel=2,
        )
    module.to(device).eval()
    return Checkpoint(
        model_name=state["model"],
        spec=spec,
        module=module,
        config=config,
        item_ids=np.asarray(state["item_ids"]),
        extras=extras,
        addon=addon,
    )


def stamp_checkpoint(path: str | Path, data: str | Path, split_spec: str) -> None:
    """Record where the checkpoint's data came from, so evaluate / predict / recommend can
    default to it. Rewrites the file atomically (in the current format)."""
    add_extras(path, data=str(Path(data).resolve()), split_spec=split_spec)


def add_extras(path: str | Path, **extras: Any) -> None:
    """Add (or replace) entries of the checkpoint's extras; rewrites the file atomically (in
    the current format)."""
    state = read_state(Path(path))
    state["extras"].update(extras)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
