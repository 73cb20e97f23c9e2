"""SASRec's options against the float64 step-by-step reference: the sampled BCE objective, the
multi-interest readout and the hierarchical basket encoder (outputs, gradients, causality,
padding), and the paper preset."""

from __future__ import annotations

import pytest
import torch

from basketgnn.models.sasrec import SPEC, SASRecConfig
from basketgnn.models.sasrec.objective import next_baskets, sample_negatives
from basketgnn.models.sequences import SequenceBatch
from basketgnn.workflow.config import load_config
from tests.support.reference_zoo import sasrec_bce_terms, sasrec_scores
from tests.support.zoo import (
    ENCODER_OPTIONS,
    N_HISTORY,
    SEQUENCES,
    TINY_ITEMS,
    USERS,
    assert_matches_reference,
    histories,
    model_vs_popularity,
    tiny_batch,
    with_padding,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OPTIONS = [pytest.param(options, id=name) for name, options in ENCODER_OPTIONS.items()]


def tiny(config: SASRecConfig):
    torch.manual_seed(0)
    return SPEC.build(TINY_ITEMS, config).double().eval(), tiny_batch(SPEC, config)


def small(**options) -> SASRecConfig:
    return SASRecConfig(**{"dim": 8, "heads": 2, "blocks": 2, "ffn_dim": 12, "dropout": 0.0, "max_len": 3, **options})


@pytest.mark.parametrize("options", OPTIONS)
def test_options_match_reference_outputs_and_gradients(options):
    config = small(**options)
    model, batch = tiny(config)
    assert_matches_reference(model, batch, config.max_len, lambda history: sasrec_scores(model, history)[0])


@pytest.mark.parametrize("options", OPTIONS)
def test_a_later_basket_changes_no_earlier_vector(options):
    model, batch = tiny(small(max_len=4, **options))
    every = lambda items: model.vectors(model.states(items, batch.basket_mask), batch.basket_mask, None)  # noqa: E731
    before = every(batch.items)  # [B, T, K, d]
    items = batch.items.clone()
    items[2, 2] = torch.tensor([8, 7, 0])  # user 2's third basket becomes {7, 6}
    after = every(items)
    torch.testing.assert_close(before[:, :2], after[:, :2], rtol=0, atol=0)
    assert not torch.allclose(before[2, 2:], after[2, 2:])
    torch.testing.assert_close(before[:2], after[:2], rtol=0, atol=0)


@pytest.mark.parametrize("options", OPTIONS)
def test_options_unchanged_when_padding_is_added(options):
    model, batch = tiny(small(max_len=6, **options))
    torch.testing.assert_close(model(batch), model(with_padding(batch)), rtol=1e-12, atol=1e-12)


def test_hierarchical_basket_vector_ignores_item_order():
    model, batch = tiny(small(basket_encoder="attention"))
    flipped = batch.items.clone()
    flipped[0, 2, :3] = batch.items[0, 2, :3].flip(0)  # user 0's basket {4, 5, 6} in reverse
    assert not torch.equal(flipped, batch.items)
    torch.testing.assert_close(model(batch), model(SequenceBatch(flipped, batch.basket_mask, batch.lengths)))


def test_next_baskets_worked_example():
    # Steps {3}, {5, 6}, target {1} (catalogue indices; slots hold index + 1).
    batch = SequenceBatch(
        items=torch.tensor([[[4, 0], [6, 7]]]), basket_mask=torch.tensor([[True, True]]), lengths=torch.tensor([2]),
        target_items=torch.tensor([1]), target_offsets=torch.tensor([0, 1]),
    )  # fmt: skip
    assert next_baskets(batch).tolist() == [[[6, 7], [2, 0]]]


def test_negatives_avoid_the_customers_items_and_cover_the_rest():
    config = small(max_len=4)
    batch = tiny_batch(SPEC, config)
    positives = next_baskets(batch)
    torch.manual_seed(0)
    draws = torch.stack([sample_negatives(batch, positives, TINY_ITEMS) for _ in range(400)])  # [400, B, T]
    for row, (u, h) in enumerate(zip(USERS, N_HISTORY)):
        held = {i + 1 for basket in SEQUENCES[u][max(0, h - 4) : h + 1] for i in basket}
        free = set(range(1, TINY_ITEMS + 1)) - held
        drawn = set(draws[:, row].flatten().tolist())
        assert drawn == (free or set(range(1, TINY_ITEMS + 1))), (row, drawn, held)  # all held: any item


def test_sampled_bce_loss_and_gradients_match_reference():
    config = small(max_len=4, interests=2, objective="sampled_bce")
    model, batch = tiny(config)
    model.train()  # dropout 0: training keeps the step vectors, nothing else changes
    torch.manual_seed(7)
    scores = model(batch)
    state = torch.get_rng_state()
    loss = SPEC.loss(model, batch, scores, config)
    loss.backward()
    fast = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.set_rng_state(state)  # the same draw the loss made
    negatives = (sample_negatives(batch, next_baskets(batch), TINY_ITEMS) - 1).tolist()  # [B, T]
    terms = []
    for row, history in enumerate(histories(config.max_len)):
        target = sorted(SEQUENCES[USERS[row]][N_HISTORY[row]])
        terms += sasrec_bce_terms(model, history, target, negatives[row])
    ref = torch.stack(terms).mean()
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12)
    ref.backward()
    for g, p in zip(fast, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-11)


def test_sampled_bce_loss_needs_the_training_forward():
    config = small(objective="sampled_bce")
    model, batch = tiny(config)
    scores = model(batch)  # eval mode keeps no step vectors
    with pytest.raises(ValueError, match="keep_step_vectors"):
        SPEC.loss(model, batch, scores, config)


def test_paper_preset_loads_with_the_papers_settings():
    settings = load_config(model="sasrec", preset="paper")
    config = settings.model
    assert (config.dim, config.blocks, config.heads, config.ffn_dim, config.dropout) == (50, 2, 1, 50, 0.5)
    assert (config.lr, config.batch_size, config.objective, config.train_prefixes) == (1e-3, 128, "sampled_bce", False)
    assert settings.fusion.fusion == "off"
    model = SPEC.build(TINY_ITEMS, config)
    assert model.keep_step_vectors and model.readout is None


@pytest.mark.parametrize("options", [{"objective": "sampled_bce", "train_prefixes": False}, {"interests": 3},
                                     {"basket_encoder": "attention"}])  # fmt: skip
def test_each_option_learns_a_planted_signal(options):
    config = SASRecConfig(dim=16, blocks=1, heads=1, ffn_dim=16, dropout=0.0, lr=1e-2, batch_size=8, max_len=8, **options)
    recall, popularity, losses = model_vs_popularity(SPEC, config, epochs=8)
    assert losses[-1] < 0.8 * losses[0]
    assert recall > popularity + 0.1, (recall, popularity)


def test_unknown_basket_encoder_is_refused():
    with pytest.raises(ValueError, match="basket_encoder must be mean or attention"):
        SPEC.build(4, SASRecConfig.model_construct(**{**SASRecConfig().model_dump(), "basket_encoder": "sum"}))
