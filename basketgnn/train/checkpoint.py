"""A checkpoint is one file: weights, config, the item id mapping, validation metrics and, for
models fused with TIFU-KNN (``fusion``) or with neighbour scores (``neighbours``), the chosen
weight and the training customers' pool."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError

from basketgnn.errors import UserError
from basketgnn.io_utils import atomic_path
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig
from basketgnn.models.neighbours import NeighbourPool
from basketgnn.scoring.fusion import ScoreFusion

CHECKPOINT_FORMAT = "basketgnn-dnntsp-checkpoint/1"


def save_checkpoint(
    path: str | Path,
    model: DNNTSP,
    config: DNNTSPConfig,
    item_ids: np.ndarray,
    extra: dict[str, Any],
) -> None:
    """Write the checkpoint atomically (a crash never leaves a half-written file)."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": config.model_dump(),
        "num_items": model.num_items,
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "item_ids": [str(i) for i in item_ids.tolist()],
        **extra,
    }
    pool = model.neighbour_pool
    if pool is not None:
        state["neighbours"] = {**pool.state(), "weight": float(model.neighbour_weight)}
    if model.fusion is not None:
        state["fusion"] = model.fusion.state()
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[DNNTSP, DNNTSPConfig, dict[str, Any]]:
    """Load (model in eval mode, config, the whole checkpoint dict)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint file. Train one with `basketgnn train`.")
    try:
        # Always onto the CPU first: a GPU-trained checkpoint must load on any machine.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
        raise UserError(f"{path}: not a basketgnn checkpoint ({type(e).__name__}).") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path}: not a basketgnn DNNTSP checkpoint (format {CHECKPOINT_FORMAT}).")
    try:
        DNNTSPConfig(device=device)
    except ValidationError as e:
        raise UserError(f"device {device!r}: {e.errors()[0]['msg']}") from None
    try:
        config = DNNTSPConfig(**state["config"]).model_copy(update={"device": device})
        model = DNNTSP.from_config(state["num_items"], config)
        model.load_state_dict(state["state_dict"])
        if config.fusion != "off" and "neighbour_choice" not in state:
            warnings.warn(
                f"{path}: the run stopped before choosing its fusion / neighbour weight; this "
                "checkpoint ranks by the model alone. Rerun the same `basketgnn train` to finish it.",
                stacklevel=2,
            )
        if state.get("neighbours") is not None:
            model.neighbour_pool = NeighbourPool.from_state(state["neighbours"])
            model.neighbour_weight = float(state["neighbours"]["weight"])
        if state.get("fusion") is not None:
            model.fusion = ScoreFusion.from_state(state["fusion"])
    except Exception as e:  # noqa: BLE001 - a checkpoint of another version or model
        raise UserError(
            f"{path}: written by an incompatible basketgnn version ({type(e).__name__}); "
            "train it again."
        ) from None
    model.to(device).eval()
    return model, config, state


def stamp_checkpoint(path: str | Path, data: str | Path, split_spec: str) -> None:
    """Record where the checkpoint's data came from, so evaluate / predict / recommend can
    default to it. Rewrites the file atomically."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    state.update(data=str(Path(data).resolve()), split_spec=split_spec)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
