"""DIN over the whole catalogue: the dense reference, chunking, padding, learning."""

from __future__ import annotations

import pytest
import torch

from basketgnn.models.din import SPEC, DINConfig
from basketgnn.workflow.config import load_config
from tests.support.reference_zoo import din_scores
from tests.support.zoo import (
    TINY_ITEMS,
    assert_matches_reference,
    model_vs_popularity,
    tiny_batch,
    with_padding,
)


def tiny(config: DINConfig):
    torch.manual_seed(0)
    model = SPEC.build(TINY_ITEMS, config).double()
    batch = tiny_batch(SPEC, config)
    if config.activation == "dice":  # give Dice moving averages that are not the identity
        model.train()
        model(batch)
    return model.eval(), batch  # Dice: moving averages, a function of each (user, item) alone


@pytest.mark.parametrize("activation, history", [("prelu", "baskets"), ("dice", "items")])
def test_matches_reference_outputs_and_gradients(activation, history):
    config = DINConfig(
        dim=4, attention_hidden=[5], hidden=[6, 3], activation=activation, history=history, max_len=3,
        max_chunk_elements=200,  # a few items per chunk
    )
    model, batch = tiny(config)
    assert_matches_reference(model, batch, config.max_len, lambda history: din_scores(model, history))


def test_chunk_size_changes_nothing():
    model, batch = tiny(DINConfig(dim=4, attention_hidden=[4], hidden=[4]))
    whole = model(batch)
    model.max_chunk_elements = 1  # one item per chunk
    torch.testing.assert_close(model(batch), whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("history", ["baskets", "items"])
def test_scores_unchanged_when_padding_is_added(history):
    model, batch = tiny(DINConfig(dim=4, attention_hidden=[4], hidden=[4], history=history))
    torch.testing.assert_close(model(batch), model(with_padding(batch)), rtol=1e-12, atol=1e-12)


def test_learns_a_planted_signal_and_beats_popularity():
    config = DINConfig(dim=8, attention_hidden=[8], hidden=[16], lr=1e-2, batch_size=8, max_len=8)
    recall, popularity, losses = model_vs_popularity(SPEC, config, epochs=8)
    assert losses[-1] < 0.8 * losses[0]
    assert recall > popularity + 0.1, (recall, popularity)


def test_paper_preset_loads_with_the_papers_network():
    settings = load_config(model="din", preset="paper")
    config = settings.model
    assert (config.dim, config.attention_hidden, config.hidden, config.activation) == (12, [36], [200, 80], "dice")
    assert (config.history, config.batch_size, settings.fusion.fusion) == ("items", 32, "off")
