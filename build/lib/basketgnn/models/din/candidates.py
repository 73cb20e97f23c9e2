"""DIN's training candidates: the batch's positive items and K seeded negatives.

DIN is trained on shown items, clicked or not (Zhou et al. 2018, section 5: a logloss over labelled
(user, ad) samples); here a training batch scores the items bought in any of its target
baskets plus ``negatives`` items drawn uniformly without replacement from the rest of the
catalogue, and the loss is the multi-label loss over those columns only. Scoring at inference
is still over the whole catalogue. When the positives and K negatives would cover the catalogue,
every item is a candidate and the loss is the whole-catalogue loss exactly.

The draw uses torch's global generator, which the engine seeds at the start of every epoch
(``seed``, epoch, rank), so a run and its resumed twin draw the same negatives.

Example: 6 items, targets {1, 4}, negatives 2 -> keys for items 0, 2, 3, 5 only, the two
largest kept, e.g. [0, 1, 3, 4] (sorted; positives always included).

Shapes: target_items [nnz] (catalogue indices, repeats allowed) -> candidates [C] (sorted,
distinct), C = |positives| + min(negatives, I - |positives|).
"""

from __future__ import annotations

import torch


def sample_candidates(
    target_items: torch.Tensor, n_items: int, negatives: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sorted catalogue indices: every target item and ``negatives`` other items at random."""
    positive = torch.zeros(n_items, dtype=torch.bool, device=target_items.device)
    positive[target_items] = True
    n_negative = n_items - int(positive.sum())
    if negatives >= n_negative:  # everything fits: the whole catalogue, no draw
        return torch.arange(n_items, device=target_items.device)
    keys = torch.rand(n_items, generator=generator, device=target_items.device)  # [I] in [0, 1)
    keys = keys.masked_fill(positive, -1.0)  # positives are never drawn as negatives
    drawn = keys.topk(negatives).indices  # [negatives]: a uniform draw without replacement
    return torch.cat([positive.nonzero().squeeze(1), drawn]).sort().values
