"""Warm start: begin training from an earlier run's checkpoint of the same model.

A nightly run trains on a log that changed a little since yesterday: some items are new, some
are gone, and the catalogue indices of the rest moved. Warm start loads yesterday's weights
into today's freshly built module:

* Weights and buffers without an item axis (attention, GCN, scorer weights, BatchNorm
  statistics) are copied as they are.
* Item-indexed entries (``ModelSpec.item_indexed``; by default those whose first dimension is
  ``I + p`` for a catalogue of I items and p leading padding rows: embeddings, item gates,
  item biases and priors) are mapped by item id through both id maps: row ``p + i_old`` of the
  old entry becomes row ``p + i_new`` of the new one for every item both runs know; padding
  rows are copied; items new today keep the fresh initialisation the module was built with
  (after ``ModelSpec.init``, so a data-dependent start such as DNNTSP's item prior covers
  them); items gone today are dropped.
* Customers: no model of the engine has per-customer weights (``ModelSpec.build`` is given the
  catalogue size only; a customer is their history), so nothing is mapped by customer id here; the fusion with TIFU-KNN is chosen afresh after
  training from today's customers, and the training sample (:mod:`basketgnn.data.sample`) is drawn by
  customer id, so a customer sampled yesterday is sampled today.

The optimiser starts afresh (Adam's moments of yesterday's last steps describe yesterday's
loss). On the same data, the warm-started module scores exactly as the checkpoint's did.

A checkpoint of another model, or of the same model built with other architecture options
(any weight of another shape), is a :class:`UserError` naming what differs.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from basketgnn.engine.checkpoint import read_state
from basketgnn.errors import UserError
from basketgnn.io_utils import file_sha256
from basketgnn.models.options import TrainOptions
from basketgnn.models.spec import ModelSpec

# Catalogue sizes the default item_indexed rule builds the module at (small: building is cheap).
_PROBE_SIZES = (5, 6)


@dataclass(frozen=True)
class PreviousModel:
    """An earlier run's checkpoint as warm start reads it (weights on the CPU)."""

    path: Path
    sha256: str
    model: str
    config: dict[str, Any]
    state: dict[str, torch.Tensor]
    item_ids: np.ndarray
    extras: dict[str, Any]

    @property
    def trained_at(self) -> str:
        """When the checkpoint was written (the file's modification time, UTC, ISO 8601)."""
        mtime = self.path.stat().st_mtime
        return datetime.datetime.fromtimestamp(mtime, datetime.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class WarmStartReport:
    """What a warm start reused: the checkpoint, and the items kept, new and dropped."""

    checkpoint: str
    sha256: str
    model: str
    trained_at: str
    previous_epoch: int | None
    items_kept: int
    items_new: int
    items_dropped: int
    item_entries: tuple[str, ...]
    """The state-dict entries mapped by item id."""

    def describe(self) -> str:
        return (
            f"warm start from {self.checkpoint} (written {self.trained_at}): "
            f"{self.items_kept:,} items kept, {self.items_new:,} new, {self.items_dropped:,} dropped"
        )

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["item_entries"] = list(self.item_entries)
        return d


def read_previous(path: str | Path, spec: ModelSpec) -> PreviousModel:
    """Read ``path`` for warm-starting ``spec``'s model; another model's checkpoint is an error."""
    path = Path(path).resolve()
    state = read_state(path)
    if state["model"] != spec.name:
        raise UserError(
            f"{path}: a {state['model']} checkpoint, but this run trains {spec.name}; warm start "
            f"needs a checkpoint of the same model. Pass a {spec.name} checkpoint, or train "
            "without warm start."
        )
    return PreviousModel(
        path=path,
        sha256=file_sha256(path),
        model=state["model"],
        config=dict(state["config"]),
        state=dict(state["state_dict"]),
        item_ids=np.asarray(state["item_ids"]).astype(str),
        extras=dict(state.get("extras") or {}),
    )


def item_indexed_entries(spec: ModelSpec, config: Any) -> dict[str, int]:
    """State-dict name -> number of leading non-item (padding) rows, for every item-indexed
    entry of ``spec``'s module (``ModelSpec.item_indexed``, or the rule stated there)."""
    if spec.item_indexed is not None:
        return dict(spec.item_indexed(config))
    small, large = _PROBE_SIZES
    with torch.random.fork_rng():  # probing must not move the caller's random stream
        a = {k: tuple(v.shape) for k, v in spec.build(small, config).state_dict().items()}
        b = {k: tuple(v.shape) for k, v in spec.build(large, config).state_dict().items()}
    entries = {}
    for name, shape in a.items():
        other = b[name]
        if shape == other:
            continue
        grows_by = other[0] - shape[0] if len(shape) == len(other) and len(shape) > 0 else None
        if grows_by != large - small or shape[1:] != other[1:] or shape[0] < small:
            raise ValueError(
                f"{spec.name}: state entry {name!r} has shape {shape} with {small} items and "
                f"{other} with {large}; only a first dimension of items plus fixed padding is "
                "mapped by default: give the ModelSpec an item_indexed hook"
            )
        entries[name] = shape[0] - small
    return entries


def _architecture_difference(previous: dict[str, Any], config: Any) -> str:
    """``option a there, b here`` for every model option (not a training option) that differs."""
    model_options = [f for f in type(config).model_fields if f not in TrainOptions.model_fields]
    diffs = [
        f"{f} {previous.get(f)!r} there, {getattr(config, f)!r} here"
        for f in model_options
        if previous.get(f) != getattr(config, f)
    ]
    return "; ".join(diffs)


def _incompatible(previous: PreviousModel, config: Any, what: str) -> UserError:
    diff = _architecture_difference(previous.config, config)
    return UserError(
        f"{previous.path}: this {previous.model} checkpoint was built with other architecture "
        f"options than this run ({diff or what}), so its weights do not fit. Train with the "
        "checkpoint's options, or without warm start."
    )


def shared_item_rows(old_ids: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Catalogue indices of the items both id maps hold: (old indices, new indices), in new
    catalogue order.

    Example: old [a b c], new [c d a] -> old [2 0], new [0 2] (c and a kept, b dropped, d new).

    Shapes: old_ids [I_old], new_ids [I_new] -> ([kept] int64, [kept] int64).
    """
    old_index = pd.Index(np.asarray(old_ids).astype(str))
    if not old_index.is_unique:
        raise ValueError("the checkpoint's item ids are not unique")
    pos = old_index.get_indexer(np.asarray(new_ids).astype(str))  # -1: new item
    new_rows = np.flatnonzero(pos >= 0)
    return pos[new_rows].astype(np.int64), new_rows.astype(np.int64)


@torch.no_grad()
def apply_warm_start(
    module: nn.Module, spec: ModelSpec, config: Any, previous: PreviousModel, item_ids: np.ndarray
) -> WarmStartReport:
    """Load ``previous``'s weights into ``module`` (built for the catalogue ``item_ids``), items
    mapped by id as the module docstring says; returns what was kept, new and dropped."""
    fresh = module.state_dict()
    old = previous.state
    if set(fresh) != set(old):
        missing = sorted(set(fresh) ^ set(old))
        raise _incompatible(previous, config, f"weights {', '.join(missing[:3])} in one only")
    entries = item_indexed_entries(spec, config)
    old_rows, new_rows = shared_item_rows(previous.item_ids, item_ids)
    n_old = len(previous.item_ids)
    loaded: dict[str, torch.Tensor] = {}
    for name, target in fresh.items():
        source = old[name]
        if name not in entries:
            if source.shape != target.shape:
                raise _incompatible(
                    previous, config, f"{name} {tuple(source.shape)} there, {tuple(target.shape)} here"
                )
            loaded[name] = source.to(dtype=target.dtype)
            continue
        pad = entries[name]
        if source.shape[1:] != target.shape[1:] or source.shape[0] != n_old + pad:
            raise _incompatible(
                previous, config, f"{name} {tuple(source.shape)} there, {tuple(target.shape)} here"
            )
        value = target.detach().clone().cpu()
        src = source.to(dtype=value.dtype)
        value[:pad] = src[:pad]
        value[pad + torch.from_numpy(new_rows)] = src[pad + torch.from_numpy(old_rows)]
        loaded[name] = value
    module.load_state_dict(loaded)
    kept = len(new_rows)
    epoch = previous.extras.get("epoch")
    return WarmStartReport(
        checkpoint=str(previous.path),
        sha256=previous.sha256,
        model=previous.model,
        trained_at=previous.trained_at,
        previous_epoch=int(epoch) if epoch is not None else None,
        items_kept=kept,
        items_new=len(item_ids) - kept,
        items_dropped=n_old - kept,
        item_entries=tuple(sorted(entries)),
    )
