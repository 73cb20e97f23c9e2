"""What SASRec, BERT4Rec and DIN share: the options and the batches of basket sequences."""

from __future__ import annotations

from pydantic import Field

from basketgnn.data.dataset import BasketData
from basketgnn.data.sequences import DEFAULT_MAX_BASKET_ITEMS, SequenceSource, sequence_batches
from basketgnn.data.split import Instances
from basketgnn.engine.options import TrainOptions


class SequenceOptions(TrainOptions):
    """The engine's options plus how much of each history a sequential model reads."""

    max_len: int = Field(20, ge=1, description="Most recent history baskets read (DC and TaFeng have at most 20).")
    max_basket_items: int = Field(
        DEFAULT_MAX_BASKET_ITEMS, ge=1, description="Items read per basket (the first ones of longer baskets)."
    )


def batches(data: BasketData, instances: Instances, config: SequenceOptions, with_targets: bool) -> SequenceSource:
    """``ModelSpec.batches`` of the sequential models (targets are collated on request)."""
    return sequence_batches(data, instances, config.max_len, config.max_basket_items)
