"""The contract between a trainable model, the one training engine and the recommender that
scores it.

A neural model is one folder under ``basketgnn/models/<name>/`` that builds a :class:`ModelSpec`
and registers it (``basketgnn.registry``). The engine (``basketgnn/engine/``) owns everything
else of training: devices, batching order, the optimiser, early stopping, resume, checkpoints,
logs, DDP; :class:`basketgnn.recommenders.neural.NeuralRecommender` scores and ranks with it.

The pieces a model supplies:

* ``config_cls``: a pydantic model of its options. It subclasses
  :class:`basketgnn.models.options.TrainOptions`, so every
  model has the same training options (lr, epochs, patience, seed, device, ...) under the same
  names; model options are added beside them.
* ``build(n_items, config) -> nn.Module``: a plain module whose ``forward(batch)`` returns
  scores of every catalogue item, shape [B, n_items] (higher = more likely next).
* ``batches(data, instances, config, with_targets) -> BatchSource``: what the module reads;
  ``with_targets`` is True for the training batches only (DNNTSP's ``train_history_items``
  caps those and nothing else).
  ``BatchSource.lengths`` [n] orders instances into batches of similar length;
  ``collate(idx, with_targets)`` returns a batch with ``.to(device)`` and, when
  ``with_targets``, ``target_items`` [nnz] / ``target_offsets`` [B + 1] (CSR of the target
  baskets, catalogue indices).
* ``loss(module, batch, scores, config) -> scalar``: optional; the default is the multi-label
  loss named by ``config.loss`` against the target baskets. Models with their own training
  objective (BERT4Rec's Cloze task) supply one.
* ``skip_batch(batch) -> bool``: optional; True for a training batch the module cannot learn
  from (DNNTSP: train-mode BatchNorm over fewer than two rows). Skipped batches still count
  as steps of the batch plan, so every rank of a distributed run skips the same ones.
* ``init(module, data, train, config)``: optional; sets data-dependent starting values before
  training (DNNTSP's ``item_prior``: an output bias from the training targets' item
  frequencies; ``base_rate_init``: the output bias at the targets' base rate).
* ``item_indexed(config) -> {state-dict name: leading non-item rows}``: optional; which
  weights and buffers have one row per catalogue item, for warm start
  (:mod:`basketgnn.engine.warm_start` maps their rows through both runs' item ids). The
  default finds them by building the module at two catalogue sizes: an entry whose first
  dimension is ``I + p`` at every catalogue size ``I`` (p >= 0 fixed, other dimensions
  unchanged) is item-indexed, its first ``p`` rows are padding (kept as they are) and row
  ``p + i`` is catalogue item ``i``. A model whose item rows are laid out otherwise supplies
  this hook.
* ``score_sparse(module, batch, wanted=None) -> SparseForward | None``: optional; the module's
  scores of a batch as one row shared by every customer plus each customer's own entries
  (DNNTSP's default configuration: an item outside a customer's history scores the same for
  everyone). Ranking then reads a few candidates per customer instead of the [B, n_items]
  matrix, with the same items and values. None for a configuration without that form. With
  ``wanted`` [B, C] (the items each batch row is read at), the own entries at those items
  are enough (:func:`wanted_entries`): a model may leave the others out and skip their work
  (DNNTSP: the attention of the nodes no candidate reads). The hook must take ``wanted``
  (the re-ranking stage passes it), and may ignore it: the scores at those items are what
  matter, and a reading elsewhere gets the shared row.
* ``sparse_loss(config) -> loss | None``: optional; for a configuration whose training loss
  can be taken from the scores in shared form, that loss ``(module, batch, SparseForward,
  config) -> scalar``: training then calls the module as ``module(batch, sparse=True)``, which
  returns a :class:`SparseForward`, and never builds the [B, n_items] matrix (DNNTSP's default:
  the soft-margin loss summed per item and per entry). The same loss and gradients as ``loss``
  on the dense scores; None keeps the dense path.
* ``attention(module, batch, rows, items) -> TemporalWeights | None``: optional; for the
  reasons given with a recommendation, how much each past basket of the window weighs in the
  vector of each pair (batch row, item) asked for (DNNTSP: its temporal attention and
  readout, for the items of the window). None for a configuration without such weights.
* ``presets``: optional; named sets of config keys (``basketgnn train --preset NAME``), e.g.
  DNNTSP's ``paper``: the published model with the authors' training schedule.

Registration (``basketgnn/registry.py``) is one line naming the package, whose ``__init__.py``
exposes ``SPEC: ModelSpec``; the package is imported only when the model is used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.graph.collate_kernel import entries_in
from basketgnn.models.options import TrainOptions


class Batch(Protocol):
    target_items: torch.Tensor | None
    target_offsets: torch.Tensor | None

    def to(self, device: torch.device | str) -> Batch: ...


@dataclass(frozen=True)
class SparseForward:
    """A batch's scores in shared form: ``base`` [n_items] for items outside a customer's own
    entries, and entry m = (``row[m]``, ``item[m]``) scoring ``value[m]``; ``row`` indexes the
    batch's rows.

    Shapes: base [I], row [M], item [M], value [M]."""

    base: torch.Tensor
    row: torch.Tensor
    item: torch.Tensor
    value: torch.Tensor


def wanted_entries(row: torch.Tensor, item: torch.Tensor, wanted: torch.Tensor, n_items: int) -> torch.Tensor:
    """The places m (ascending) of the entries (row[m], item[m]) whose item is among
    ``wanted[row[m]]``: the own entries a reading at ``wanted`` needs.

    On the CPU a compiled pass (:func:`~basketgnn.graph.collate_kernel.entries_in`); elsewhere
    a search in the sorted (row, item) keys of ``wanted``, the same places.

    Shapes: row, item [M] (batch rows, catalogue items); wanted [B, C] item indices -> [M']."""
    if row.device.type == "cpu":
        places = entries_in(row.to(torch.int64).numpy(), item.to(torch.int64).numpy(),
                            wanted.to(torch.int64).contiguous().numpy(), n_items)  # fmt: skip
        return torch.from_numpy(places)
    return searched_entries(row, item, wanted, n_items)


def searched_entries(row: torch.Tensor, item: torch.Tensor, wanted: torch.Tensor, n_items: int) -> torch.Tensor:
    """:func:`wanted_entries` in tensor operations, on any device: each entry's key row · I +
    item searched among the ascending keys of ``wanted``. Shapes: as :func:`wanted_entries`."""
    B = wanted.shape[0]
    keys = (torch.arange(B, device=wanted.device)[:, None] * n_items + wanted.sort(dim=1).values).reshape(-1)  # ascending
    query = row.to(torch.int64) * n_items + item.to(torch.int64)  # [M]
    if len(keys) == 0:
        return torch.zeros(0, dtype=torch.int64, device=row.device)
    at = torch.searchsorted(keys, query).clamp_(max=len(keys) - 1)
    return torch.nonzero(keys.index_select(0, at) == query).squeeze(1)


@dataclass(frozen=True)
class TemporalWeights:
    """A batch's per-basket weights: entry m is (batch row ``row[m]``, catalogue item
    ``item[m]``), whose window of ``length[m]`` baskets (oldest first) gives basket t the share
    ``weight[m, t]`` (summing to 1 over t < length[m]; 0 past it).

    Shapes: row [M], item [M], length [M], weight [M, T]."""

    row: torch.Tensor
    item: torch.Tensor
    length: torch.Tensor
    weight: torch.Tensor


class BatchSource(Protocol):
    """The model's view of a set of instances; ``lengths`` [n] (history lengths) for bucketing."""

    @property
    def lengths(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def collate(self, idx: np.ndarray, with_targets: bool = True) -> Batch: ...


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine needs to train, checkpoint and score one kind of neural model."""

    name: str
    description: str  # one line, shown in `basketgnn train --help` and the model table
    config_cls: type[TrainOptions]
    build: Callable[[int, Any], nn.Module]
    batches: Callable[[BasketData, Instances, Any, bool], BatchSource]
    loss: Callable[[nn.Module, Batch, torch.Tensor, Any], torch.Tensor] | None = None
    skip_batch: Callable[[Batch], bool] | None = None
    init: Callable[[nn.Module, BasketData, Instances, Any], None] | None = None
    item_indexed: Callable[[Any], dict[str, int]] | None = None
    score_sparse: Callable[..., SparseForward | None] | None = None
    sparse_loss: Callable[[Any], Callable[[nn.Module, Batch, SparseForward, Any], torch.Tensor] | None] | None = None
    attention: Callable[[nn.Module, Batch, torch.Tensor, torch.Tensor], TemporalWeights | None] | None = None
    #: Named starting points of the model's config keys (``basketgnn train --preset NAME``).
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
