"""What SASRec, BERT4Rec and DIN share: the options and the batches of basket sequences."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.models.options import TrainOptions
from basketgnn.models.sequences import DEFAULT_MAX_BASKET_ITEMS, SequenceSource, sequence_batches


class SequenceOptions(TrainOptions):
    """The engine's options plus how much of each history a sequential model reads."""

    max_len: int = Field(20, ge=1, description="Most recent history baskets read (DC and TaFeng have at most 20).")
    max_basket_items: int = Field(
        DEFAULT_MAX_BASKET_ITEMS, ge=1, description="Items read per basket (the first ones of longer baskets)."
    )


class PrefixTrainedOptions(SequenceOptions):
    """SASRec's and BERT4Rec's training defaults, chosen on DC validation: every prefix of a
    history as an instance and lr 3e-3 reach a better validation NDCG in fewer epochs than the
    last basket alone or lr 1e-3."""

    train_prefixes: bool = Field(
        True, description="Train on every prefix of each training history (predict basket h from baskets < h)."
    )
    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    epochs: int = Field(40, ge=1, description="Maximum number of epochs.")
    patience: int = Field(4, ge=1, description="Stop after this many epochs without a better validation NDCG.")


class AttentionEncoderOptions(PrefixTrainedOptions):
    """How SASRec and BERT4Rec turn a basket into a vector and read the sequence's states out;
    the defaults (the mean of the item vectors, one state) are the models as published."""

    basket_encoder: Literal["mean", "attention"] = Field(
        "mean",
        description="mean: a basket is the mean of its item vectors; attention: the hierarchical encoder, one "
        "Transformer block among a basket's items before the mean, then the blocks across baskets.",
    )
    interests: int = Field(
        1, ge=1,
        description="1: score items with the step's state; K > 1: the multi-interest readout, K attention "
        "pools of the states, an item scored by the largest of its K scores.",
    )  # fmt: skip


def batches(data: BasketData, instances: Instances, config: SequenceOptions, with_targets: bool) -> SequenceSource:
    """``ModelSpec.batches`` of the sequential models (targets are collated on request)."""
    return sequence_batches(data, instances, config.max_len, config.max_basket_items)
