"""SASRec for baskets: causal self-attention over pooled basket embeddings (docs/models.md)."""

from __future__ import annotations

from basketgnn.models.sasrec.config import SASRecConfig
from basketgnn.models.sasrec.model import SASRec
from basketgnn.models.sasrec.objective import sampled_bce_loss
from basketgnn.models.sequences import SequenceBatch
from basketgnn.models.sequential import batches
from basketgnn.models.spec import ModelSpec
from basketgnn.nn.losses import compute_loss, multi_hot


def build(n_items: int, config: SASRecConfig) -> SASRec:
    return SASRec(
        n_items, dim=config.dim, blocks=config.blocks, heads=config.heads, ffn_dim=config.ffn_dim,
        dropout=config.dropout, max_len=config.max_len, basket_encoder=config.basket_encoder,
        interests=config.interests, keep_step_vectors=config.objective == "sampled_bce",
    )  # fmt: skip


def loss(module, batch: SequenceBatch, scores, config: SASRecConfig):
    """The objective named by ``config.objective`` (see objective.py for sampled_bce)."""
    if config.objective == "sampled_bce":
        return sampled_bce_loss(module, batch, scores, config)
    if batch.target_items is None or batch.target_offsets is None:
        raise ValueError("the multi-label loss needs a batch collated with targets")
    y = multi_hot(batch.target_items, batch.target_offsets, scores.shape[1]).to(scores.dtype)
    return compute_loss(config.loss, scores, y)


#: ``basketgnn train --model sasrec --preset paper``: the published settings (section IV-C and the
#: authors' code): d = 50, 2 blocks, 1 head, feed-forward d, dropout 0.5 (the paper's value for
#: its sparse sets), Adam lr 1e-3, 128 sequences a batch, sequences of at most 50 steps, the
#: BCE objective with one negative per step on each customer's whole history (no prefixes),
#: no weight decay, no fusion. Early stopping (patience 20 of at most 200 epochs) stands in for
#: the paper's fixed epoch count; Adam's β2 stays torch's 0.999 (the authors' code: 0.98).
PAPER = {
    "dim": 50, "blocks": 2, "heads": 1, "ffn_dim": 50, "dropout": 0.5, "lr": 0.001, "batch_size": 128,
    "max_len": 50, "objective": "sampled_bce", "train_prefixes": False, "weight_decay": 0.0,
    "basket_encoder": "mean", "interests": 1, "epochs": 200, "patience": 20, "fusion": "off",
}  # fmt: skip


SPEC = ModelSpec(
    name="sasrec",
    description="SASRec: causal self-attention over the basket sequence (Kang & McAuley 2018)",
    config_cls=SASRecConfig,
    build=build,
    batches=batches,
    loss=loss,
    presets={"paper": PAPER},
)

__all__ = ["SPEC", "SASRec", "SASRecConfig", "sampled_bce_loss"]
