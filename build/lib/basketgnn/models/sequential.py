"""What SASRec, BERT4Rec and DIN share: the options and the batches of basket sequences."""

from __future__ import annotations

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


def batches(data: BasketData, instances: Instances, config: SequenceOptions, with_targets: bool) -> SequenceSource:
    """``ModelSpec.batches`` of the sequential models (targets are collated on request)."""
    return sequence_batches(data, instances, config.max_len, config.max_basket_items)
