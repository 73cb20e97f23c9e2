"""SASRec's own objective (Kang & McAuley 2018, section III-E): binary cross-entropy at every
step of the sequence in one pass, with one sampled negative item per step.

For baskets, step t's expected output o_t is the next basket: history basket t + 1 for a step
before the last, the instance's target basket at the last real step T_u - 1. With r_{t,i} the
step's score of item i (y_i of the model at step t), the loss is the mean over the real steps of

    ℓ_t = -(1 / |o_t|) Σ_{i ∈ o_t} log σ(r_{t,i})  -  log(1 - σ(r_{t,j_t}))

The items of a basket share the positive half, so every step weighs the same whatever its basket
size (for one-item baskets this is the paper's loss term by term). The negative j_t is drawn
uniformly, one per step, from the catalogue items the customer does not hold in the batch (the
paper's j ∉ S^u: every item of the window's history baskets, as read, and of the target
basket); a customer holding every item draws from the whole catalogue. A history basket's
items as target are those the batch read (``max_basket_items``); the target basket is whole.

The draw uses torch's default generator, which the engine seeds per epoch, so a resumed run
draws the same negatives.

Example: steps {3}, {5, 6}, target {1} -> o_0 = {5, 6}, o_1 = {1}; j_0, j_1 ∉ {1, 3, 5, 6}.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from basketgnn.models.multi_interest import max_over_interests_of
from basketgnn.models.sequences import SequenceBatch


def next_baskets(batch: SequenceBatch) -> torch.Tensor:
    """Every step's expected output as item slots (item + 1, 0 = none).

    Shapes: batch.items [B, T, L], target CSR -> [B, T, P], P = max(L, largest target basket).
    """
    assert batch.target_items is not None and batch.target_offsets is not None
    B, T, L = batch.items.shape
    device = batch.items.device
    counts = batch.target_offsets.diff()  # [B]
    P = max(L, int(counts.max()) if B else 0)
    out = torch.zeros(B, T, P, dtype=torch.int64, device=device)
    out[:, : T - 1, :L] = batch.items[:, 1:]  # step t's next history basket (padding past T_u)
    last = batch.lengths - 1  # [B]
    out[torch.arange(B, device=device), last] = 0
    row = torch.repeat_interleave(torch.arange(B, device=device), counts)  # [nnz]
    slot = torch.arange(len(row), device=device) - batch.target_offsets[:-1][row]  # [nnz]
    out[row, last[row], slot] = batch.target_items + 1
    return out


def sample_negatives(batch: SequenceBatch, positives: torch.Tensor, n_items: int) -> torch.Tensor:
    """One item per step, uniform over the items the row does not hold (item + 1).

    Shapes: positives [B, T, P] -> [B, T].
    """
    B, T, _ = batch.items.shape
    held = torch.zeros(B, n_items + 1, dtype=torch.bool, device=positives.device)
    held.scatter_(1, batch.items.reshape(B, -1), True)
    held.scatter_(1, positives.reshape(B, -1), True)
    free = ~held[:, 1:]  # [B, I]
    free[~free.any(dim=1)] = True
    return torch.multinomial(free.to(torch.float32), T, replacement=True) + 1  # [B, T]


def sampled_bce_loss(module: nn.Module, batch: SequenceBatch, scores: torch.Tensor, config: object) -> torch.Tensor:
    """``ModelSpec.loss`` of the objective above, from the step vectors the training forward kept."""
    model = getattr(module, "module", module)  # unwrap DistributedDataParallel
    if batch.target_items is None or batch.target_offsets is None:
        raise ValueError("the sampled BCE loss needs a batch collated with targets")
    vectors, model.step_vectors = model.step_vectors, None  # [B, T, K, d]; one forward, one loss
    if vectors is None:
        raise ValueError("the sampled BCE loss needs a training forward built with keep_step_vectors")
    E = model.items.weight  # [I + 1, d]
    positives = next_baskets(batch)  # [B, T, P]
    negatives = sample_negatives(batch, positives, model.n_items)  # [B, T]
    is_positive = (positives > 0).to(vectors.dtype)
    r_pos = max_over_interests_of(vectors, E[positives])  # [B, T, P]
    r_neg = max_over_interests_of(vectors, E[negatives].unsqueeze(2))[..., 0]  # [B, T]
    pos_term = -(F.logsigmoid(r_pos) * is_positive).sum(-1) / is_positive.sum(-1).clamp(min=1)
    per_step = pos_term - F.logsigmoid(-r_neg)  # [B, T]
    real = batch.basket_mask.to(vectors.dtype)
    return (per_step * real).sum() / real.sum()
