"""DNNTSP (Yu et al., KDD 2020) as one model folder: the module and its config in
``model.py``, the data it reads (per-user co-occurrence graphs, ``graph.cooccurrence``) and its
:class:`~basketgnn.models.spec.ModelSpec` here. The engine does the rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.errors import UserError
from basketgnn.graph.cooccurrence import GraphBatch, UserGraphs, build_user_graphs
from basketgnn.models.dnntsp.explain import attention_by_basket
from basketgnn.models.dnntsp.model import DNNTSP, DNNTSPConfig
from basketgnn.models.spec import ModelSpec, SparseForward, wanted_entries
from basketgnn.nn.losses import soft_margin_loss_shared

__all__ = ["DNNTSP", "DNNTSPConfig", "SPEC"]


def _build(n_items: int, config: Any) -> DNNTSP:
    return DNNTSP.from_config(n_items, config)


def _batches(data: BasketData, instances: Instances, config: Any, with_targets: bool) -> UserGraphs:
    return build_user_graphs(
        data, instances, with_targets=with_targets, max_history=config.max_history,
        # The item cap bounds the training pass only (targets: training batches).
        max_history_items=config.train_history_items if with_targets else 0,
        # Scoring passes share absent rows across customers (the same values, fewer rows); training
        # batches keep one per node, so dropout draws a mask for each.
        share_absent=not with_targets,
    )


def _too_small_for_batchnorm(batch: GraphBatch) -> bool:
    # Train-mode BatchNorm needs two rows; a lone one-item, one-basket user teaches nothing the
    # other batches do not.
    return float(batch.row_weight.sum()) < 2


def _init(module: DNNTSP, data: BasketData, train: Instances, config: Any) -> None:
    if config.catalogue_columns:
        if data.catalogue is None:
            raise UserError(
                "catalogue_columns needs an item catalogue in the prepared data: prepare the log "
                "with `basketgnn prepare ... --items CATALOGUE` (or leave catalogue_columns empty)."
            )
        module.init_catalogue(data.catalogue.select(list(config.catalogue_columns), "catalogue_columns: "))
    if config.item_prior:
        module.init_item_prior(data.targets(train.users, train.n_history).values, len(train))
    elif config.base_rate_init:
        module.init_base_rate(len(data.targets(train.users, train.n_history).values), len(train))


def _score_sparse(module: DNNTSP, batch: GraphBatch, wanted: torch.Tensor | None = None) -> SparseForward | None:
    if not module.scorer.shared_outside_history:
        return None
    nodes = None if wanted is None else wanted_entries(batch.node_user, batch.node_item, wanted, module.num_items)
    out = module(batch, sparse=True, nodes=nodes)
    assert isinstance(out, SparseForward)
    return out


def _sparse_loss(config: DNNTSPConfig) -> Callable[..., torch.Tensor] | None:
    """The soft-margin loss from the scores in shared form, where this configuration's scorer
    gives items outside a history one score for everyone (no user_context, explore_attention)."""
    if config.loss != "softmargin" or config.user_context or config.explore_attention:
        return None
    return _shared_soft_margin


def _shared_soft_margin(module: DNNTSP, batch: GraphBatch, out: SparseForward, config: DNNTSPConfig) -> torch.Tensor:
    assert batch.target_items is not None and batch.target_offsets is not None
    return soft_margin_loss_shared(out.base, out.value, out.row, out.item, batch.target_items, batch.target_offsets)


#: ``basketgnn train --preset paper``: the model and schedule of the authors' public code
#: (yule-BUAA/DNNTSP at 3876ad3): the DNNTSP constructor's defaults (no extension), Adam lr 1e-3,
#: 64 users a batch in the data's order (their DataLoader does not shuffle), all 100 epochs
#: (patience 100 never stops them), ReduceLROnPlateau on the training loss with torch's defaults
#: (patience 10, factor 0.1), the epoch with the best mean validation NDCG kept, BatchNorm
#: statistics over padded timestamps as in their batch tensor (``batchnorm_padding``), no fusion;
#: configs/published.yaml holds the same keys (tested).
PAPER = {
    "embed_dim": 32, "gcn": True, "gcn_layers": 2, "attention": True, "heads": 4,
    "head_merge": "concat", "aggregation": "learned", "gate": "learned", "dropout": 0.0,
    "presence": False, "repeat_features": False, "user_context": False, "item_prior": False,
    "explore_attention": False, "membership_steps": 0,
    "catalogue_columns": None, "catalogue_buckets": 4096,
    "max_history": 0, "train_history_items": 0, "base_rate_init": False, "train_prefixes": False,
    "loss": "softmargin", "lr": 0.001, "weight_decay": 0.0, "batch_size": 64, "batch_work": 0,
    "batch_order": "ordered", "epochs": 100, "patience": 100, "min_steps": 0,
    "lr_schedule": "plateau", "lr_patience": 10, "batchnorm_padding": True, "fusion": "off",
}  # fmt: skip


SPEC = ModelSpec(
    name="dnntsp",
    description="DNNTSP (Yu et al., KDD 2020): weighted GCN, temporal attention, gated scorer",
    config_cls=DNNTSPConfig,
    build=_build,
    batches=_batches,
    skip_batch=_too_small_for_batchnorm,
    init=_init,
    score_sparse=_score_sparse,
    sparse_loss=_sparse_loss,
    attention=attention_by_basket,
    presets={"paper": PAPER},
)
