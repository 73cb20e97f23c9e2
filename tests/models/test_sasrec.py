"""SASRec for baskets: the dense reference, causality, padding, and that it learns."""

from __future__ import annotations

import torch

from basketgnn.models.sasrec import SPEC, SASRecConfig
from tests.support.reference_zoo import sasrec_scores
from tests.support.zoo import (
    TINY_ITEMS,
    assert_matches_reference,
    model_vs_popularity,
    tiny_batch,
    with_padding,
)


def tiny(config: SASRecConfig):
    torch.manual_seed(0)
    return SPEC.build(TINY_ITEMS, config).double().eval(), tiny_batch(SPEC, config)


def test_matches_reference_outputs_and_gradients():
    config = SASRecConfig(dim=8, heads=2, blocks=2, ffn_dim=12, dropout=0.0, max_len=3)
    model, batch = tiny(config)
    assert_matches_reference(model, batch, config.max_len, lambda history: sasrec_scores(model, history)[0])


def test_a_future_basket_changes_no_earlier_output():
    model, batch = tiny(SASRecConfig(dim=8, heads=2, ffn_dim=8, dropout=0.0, max_len=4))
    before = model.states(batch.items, batch.basket_mask)
    items = batch.items.clone()
    items[2, 2] = torch.tensor([8, 7, 0])  # user 2's third basket becomes {7, 6}
    after = model.states(items, batch.basket_mask)
    torch.testing.assert_close(before[:, :2], after[:, :2], rtol=0, atol=0)
    assert not torch.allclose(before[2, 2:], after[2, 2:])
    torch.testing.assert_close(before[:2], after[:2], rtol=0, atol=0)  # other users untouched


def test_scores_unchanged_when_padding_is_added():
    model, batch = tiny(SASRecConfig(dim=8, heads=2, ffn_dim=8, dropout=0.0, max_len=6))
    torch.testing.assert_close(model(batch), model(with_padding(batch)), rtol=1e-12, atol=1e-12)


def test_learns_a_planted_signal_and_beats_popularity():
    config = SASRecConfig(dim=16, blocks=1, heads=1, ffn_dim=16, dropout=0.0, lr=1e-2, batch_size=8, max_len=8)
    recall, popularity, losses = model_vs_popularity(SPEC, config, epochs=8)
    assert losses[-1] < 0.8 * losses[0]
    assert recall > popularity + 0.1, (recall, popularity)
