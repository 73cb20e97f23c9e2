"""BERT4Rec for baskets: the dense reference, the Cloze masking (rate, no leak), padding, learning."""

from __future__ import annotations

import pytest
import torch

from basketgnn.models.bert4rec import SPEC, BERT4RecConfig
from tests.support.reference_zoo import bert4rec_logits
from tests.support.zoo import (
    ENCODER_OPTIONS,
    TINY_ITEMS,
    histories,
    model_vs_popularity,
    tiny_batch,
    with_padding,
)


def tiny(config: BERT4RecConfig):
    torch.manual_seed(0)
    return SPEC.build(TINY_ITEMS, config).double(), tiny_batch(SPEC, config)


def test_inference_matches_reference():
    config = BERT4RecConfig(dim=8, heads=2, blocks=2, ffn_dim=16, dropout=0.0, max_len=3)
    model, batch = tiny(config)
    model.eval()
    scores = model(batch)
    for row, history in enumerate(histories(config.max_len)):
        masked = [False] * len(history) + [True]  # the appended mask step only
        ref = bert4rec_logits(model, history + [[]], masked)[-1]
        torch.testing.assert_close(scores[row], ref, rtol=1e-10, atol=1e-10)


def test_masking_follows_its_rate_on_real_baskets_only():
    config = BERT4RecConfig(dim=4, heads=1, ffn_dim=4, mask_prob=0.3)
    model = SPEC.build(5, config)
    real = torch.arange(20)[None] < torch.randint(1, 21, (2000, 1))  # [2000, 20], ragged lengths
    torch.manual_seed(0)
    masked = model.draw_mask(real)
    assert not (masked & ~real).any()
    n = int(real.sum())
    rate = masked.sum().item() / n
    assert abs(rate - 0.3) < 4 * (0.3 * 0.7 / n) ** 0.5, rate  # 4 standard errors
    # Each position is masked independently: the first and the last real step alike.
    assert abs(masked[:, 0].float().mean().item() - 0.3) < 4 * (0.21 / 2000) ** 0.5


@pytest.mark.parametrize("options", [{}, *ENCODER_OPTIONS.values()], ids=["default", *ENCODER_OPTIONS])
def test_masked_baskets_and_target_never_leak(options):
    config = BERT4RecConfig(dim=8, heads=2, ffn_dim=16, dropout=0.1, max_len=4, mask_prob=0.5, **options)
    model, batch = tiny(config)
    model.train()
    torch.manual_seed(5)
    scores = model(batch)
    cloze = model.cloze
    # Replace every masked basket's items and every target by other items, same draws.
    hidden = cloze.masked[:, :-1].unsqueeze(-1) & (batch.items > 0)
    changed = batch.__class__(
        items=torch.where(hidden, 8 - batch.items + 1, batch.items),
        basket_mask=batch.basket_mask,
        lengths=batch.lengths,
        target_items=(batch.target_items + 3) % 8,
        target_offsets=batch.target_offsets,
    )
    assert not torch.equal(changed.items, batch.items)
    torch.manual_seed(5)
    scores2 = model(changed)
    assert torch.equal(model.cloze.masked, cloze.masked)
    torch.testing.assert_close(scores, scores2, rtol=0, atol=0)
    torch.testing.assert_close(cloze.logits, model.cloze.logits, rtol=0, atol=0)
    assert not torch.equal(cloze.targets, model.cloze.targets)  # the targets did change


def test_scores_unchanged_when_padding_is_added():
    model, batch = tiny(BERT4RecConfig(dim=8, heads=2, ffn_dim=8, dropout=0.0, max_len=8))
    model.eval()
    torch.testing.assert_close(model(batch), model(with_padding(batch)), rtol=1e-12, atol=1e-12)


def test_learns_a_planted_signal_and_beats_popularity():
    config = BERT4RecConfig(
        dim=16, blocks=1, heads=1, ffn_dim=32, dropout=0.0, lr=1e-2, batch_size=8, max_len=8, mask_prob=0.3
    )
    recall, popularity, losses = model_vs_popularity(SPEC, config, epochs=8)
    assert losses[-1] < 0.8 * losses[0]
    assert recall > popularity + 0.1, (recall, popularity)
