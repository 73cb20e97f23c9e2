"""BERT4Rec for baskets: bidirectional self-attention trained with the Cloze task (docs/models.md)."""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.models.bert4rec.config import BERT4RecConfig
from basketgnn.models.bert4rec.model import BERT4Rec, ClozeOutput
from basketgnn.models.sequences import SequenceBatch
from basketgnn.models.sequential import batches
from basketgnn.models.spec import ModelSpec
from basketgnn.nn.losses import compute_loss, multi_hot


def build(n_items: int, config: BERT4RecConfig) -> BERT4Rec:
    return BERT4Rec(
        n_items, dim=config.dim, blocks=config.blocks, heads=config.heads, ffn_dim=config.ffn_dim,
        dropout=config.dropout, max_len=config.max_len, mask_prob=config.mask_prob,
        basket_encoder=config.basket_encoder, interests=config.interests,
    )  # fmt: skip


def softmax_cloze(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The paper's softmax Cloze loss for baskets: at every masked step, the cross-entropy of the
    softmax over the catalogue against the uniform mix of the masked basket's items,

        ℓ_t = -(1 / |S_t|) Σ_{i ∈ S_t} log softmax(y_t)_i,

    averaged over the masked steps (a basket weighs the same whatever its size; for one-item
    baskets this is the paper's -log P(v_t | masked sequence)).

    Shapes: logits [M, I], y [M, I] multi-hot -> scalar."""
    log_p = torch.log_softmax(logits, dim=1)
    return (-(log_p * y).sum(dim=1) / y.sum(dim=1).clamp(min=1)).mean()


def cloze_loss(module: nn.Module, batch: SequenceBatch, scores: torch.Tensor, config: BERT4RecConfig) -> torch.Tensor:
    """The training loss averaged over every masked step of the batch: the appended step
    (``scores``, target = the next basket) and the masked history baskets (read from the
    training forward that produced ``scores``). ``config.objective``: the multi-label loss named
    by ``config.loss``, or the softmax Cloze loss (:func:`softmax_cloze`)."""
    model = getattr(module, "module", module)  # unwrap DistributedDataParallel
    if batch.target_items is None or batch.target_offsets is None:
        raise ValueError("the Cloze loss needs a batch collated with targets")
    y = multi_hot(batch.target_items, batch.target_offsets, scores.shape[1]).to(scores.dtype)
    cloze: ClozeOutput | None = model.cloze
    model.cloze = None  # one forward, one loss; do not keep the graph alive
    if cloze is not None and len(cloze.logits):
        scores, y = torch.cat([scores, cloze.logits]), torch.cat([y, cloze.targets])
    if config.objective == "softmax":
        return softmax_cloze(scores, y)
    return compute_loss(config.loss, scores, y)


#: ``basketgnn train --model bert4rec --preset paper``: the published settings (section 4.4):
#: d = 64, 2 blocks, 2 heads, feed-forward 4d, dropout 0.1, GELU, Adam lr 1e-4, 256 sequences a
#: batch, sequences of at most 50 steps (the paper's length for its sparse sets), mask
#: proportion 0.6 (the paper's choice for its sparsest set, Beauty), the softmax Cloze loss on
#: each customer's whole history (no prefixes), no fusion. Early stopping (patience 20 of at
#: most 200 epochs) stands in for the paper's step budget; the paper's linear learning-rate decay
#: and its decoupled weight decay 0.01 (lr · 0.01 = 1e-6 a step) are not options of the engine,
#: whose Adam weight decay is an L2 term of another size, so weight_decay stays 0.
PAPER = {
    "dim": 64, "blocks": 2, "heads": 2, "ffn_dim": 256, "dropout": 0.1, "lr": 0.0001, "batch_size": 256,
    "max_len": 50, "mask_prob": 0.6, "objective": "softmax", "train_prefixes": False, "weight_decay": 0.0,
    "basket_encoder": "mean", "interests": 1, "epochs": 200, "patience": 20, "fusion": "off",
}  # fmt: skip


SPEC = ModelSpec(
    name="bert4rec",
    description="BERT4Rec: bidirectional self-attention with Cloze training (Sun et al. 2019)",
    config_cls=BERT4RecConfig,
    build=build,
    batches=batches,
    loss=cloze_loss,
    presets={"paper": PAPER},
)

__all__ = ["SPEC", "BERT4Rec", "BERT4RecConfig", "cloze_loss", "softmax_cloze"]
