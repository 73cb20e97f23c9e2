"""BERT4Rec's options against the float64 step-by-step reference: the softmax Cloze loss, the
multi-interest readout and the hierarchical basket encoder (outputs, Cloze loss and gradients,
no leak of masked baskets, padding), and the paper preset."""

from __future__ import annotations

import math

import pytest
import torch

from basketgnn.models.bert4rec import SPEC, BERT4RecConfig, softmax_cloze
from basketgnn.nn.losses import multi_hot
from basketgnn.workflow.config import load_config
from tests.support.reference_zoo import bert4rec_logits
from tests.support.zoo import (
    ENCODER_OPTIONS,
    TINY_ITEMS,
    assert_matches_reference,
    histories,
    model_vs_popularity,
    tiny_batch,
    with_padding,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OPTIONS = [pytest.param(options, id=name) for name, options in ENCODER_OPTIONS.items()]


def small(**options) -> BERT4RecConfig:
    return BERT4RecConfig(**{"dim": 8, "heads": 2, "blocks": 2, "ffn_dim": 16, "dropout": 0.0, "max_len": 3, **options})


def tiny(config: BERT4RecConfig):
    torch.manual_seed(0)
    return SPEC.build(TINY_ITEMS, config).double(), tiny_batch(SPEC, config)


def appended_step(model, history):
    """The reference's scores of the appended mask step (inference)."""
    return bert4rec_logits(model, history + [[]], [False] * len(history) + [True])[-1]


@pytest.mark.parametrize("options", OPTIONS)
def test_inference_matches_reference_outputs_and_gradients(options):
    config = small(**options)
    model, batch = tiny(config)
    model.eval()
    assert_matches_reference(model, batch, config.max_len, lambda history: appended_step(model, history))


def test_softmax_cloze_hand_computed():
    # softmax([0, ln 2, 0]) = [1/4, 1/2, 1/4]; the basket {0, 1}: -(ln 1/4 + ln 1/2) / 2 = 1.5 ln 2.
    logits = torch.tensor([[0.0, math.log(2), 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)  # second: -ln 1/3
    torch.testing.assert_close(softmax_cloze(logits, y), torch.tensor((1.5 * math.log(2) + math.log(3)) / 2, dtype=torch.float64))


@pytest.mark.parametrize("options", [{}, {"objective": "softmax"}, {"objective": "softmax", "interests": 2},
                                     {"basket_encoder": "attention"}])  # fmt: skip
def test_cloze_loss_and_gradients_match_reference(options):
    """Every masked step's loss (the multi-label default: BCE averaged over all items; softmax:
    the mean over the basket's items of -log p_i), averaged over the masked steps."""
    config = small(max_len=4, mask_prob=0.5, **options)
    model, batch = tiny(config)
    model.train()  # dropout is 0: training differs from inference only by the Cloze masks
    torch.manual_seed(3)
    scores = model(batch)
    masked = model.cloze.masked.clone()  # [B, T + 1]
    assert masked[:, :-1].any(), "the draw should mask some history basket"
    loss = SPEC.loss(model, batch, scores, config)
    loss.backward()
    fast = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    targets = multi_hot(batch.target_items, batch.target_offsets, TINY_ITEMS).double()
    terms = []
    for row, history in enumerate(histories(config.max_len)):
        n = len(history)
        step_logits = bert4rec_logits(model, history + [[]], masked[row, : n + 1].tolist())
        steps = [(step_logits[t], history[t]) for t in range(n) if masked[row, t]]
        steps.append((step_logits[n], targets[row].nonzero().squeeze(1).tolist()))
        for logits, basket in steps:
            if config.objective == "softmax":  # the mean over the basket's items of -log p_i
                log_p = logits - torch.logsumexp(logits, dim=0)
                terms.append(-torch.stack([log_p[i] for i in basket]).mean())
            else:  # binary cross-entropy averaged over all items
                y = torch.zeros(TINY_ITEMS, dtype=torch.float64).index_fill_(0, torch.tensor(basket), 1.0)
                p = torch.sigmoid(logits)
                terms.append(-(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean())
    ref = torch.stack(terms).mean()
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12)
    ref.backward()
    for g, p in zip(fast, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("options", OPTIONS)
def test_options_unchanged_when_padding_is_added(options):
    model, batch = tiny(small(max_len=8, **options))
    model.eval()
    torch.testing.assert_close(model(batch), model(with_padding(batch)), rtol=1e-12, atol=1e-12)


def test_paper_preset_loads_with_the_papers_settings():
    settings = load_config(model="bert4rec", preset="paper")
    config = settings.model
    assert (config.dim, config.blocks, config.heads, config.ffn_dim, config.dropout) == (64, 2, 2, 256, 0.1)
    assert (config.lr, config.batch_size, config.objective, config.train_prefixes) == (1e-4, 256, "softmax", False)
    assert settings.fusion.fusion == "off"


@pytest.mark.parametrize("options", [{"objective": "softmax"}, {"interests": 3}, {"basket_encoder": "attention"}])
def test_each_option_learns_a_planted_signal(options):
    config = BERT4RecConfig(
        dim=16, blocks=1, heads=1, ffn_dim=32, dropout=0.0, lr=1e-2, batch_size=8, max_len=8, mask_prob=0.3, **options
    )
    recall, popularity, losses = model_vs_popularity(SPEC, config, epochs=8)
    if config.objective == "softmax":  # from about ln 24 = 3.18 nats; a 3-item basket's floor is above 1.1
        assert losses[-1] < losses[0] - 0.4, losses
    else:
        assert losses[-1] < 0.8 * losses[0], losses
    assert recall > popularity + 0.1, (recall, popularity)
