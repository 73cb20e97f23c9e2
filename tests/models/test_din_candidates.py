"""DIN trained on sampled candidates: the draw (targets always in, seeded negatives) and the
loss, which is the dense BCE restricted to the candidate columns (outputs and gradients)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from basketgnn.models.din import SPEC, DINConfig
from basketgnn.models.din.candidates import sample_candidates
from basketgnn.nn.losses import multi_hot
from tests.support.reference_zoo import din_scores
from tests.support.zoo import TINY_ITEMS, histories, model_vs_popularity, tiny_batch


def test_targets_always_among_distinct_sorted_candidates():
    targets = torch.tensor([3, 17, 3, 40, 99])  # repeats across baskets
    for seed in range(20):
        torch.manual_seed(seed)
        c = sample_candidates(targets, n_items=100, negatives=7)
        assert set(targets.tolist()) <= set(c.tolist())
        assert len(c) == 4 + 7 and len(set(c.tolist())) == len(c)  # distinct: 4 positives + 7 negatives
        assert c.tolist() == sorted(c.tolist())


def test_negatives_are_seeded_and_cover_the_rest_of_the_catalogue():
    targets = torch.tensor([0, 5])
    torch.manual_seed(1)
    a = sample_candidates(targets, n_items=50, negatives=10)
    torch.manual_seed(1)
    assert torch.equal(a, sample_candidates(targets, n_items=50, negatives=10))  # same seed, same draw
    torch.manual_seed(2)
    assert not torch.equal(a, sample_candidates(targets, n_items=50, negatives=10))
    # A seeded generator instead of the global one; every non-target item is drawn sometimes.
    g = torch.Generator().manual_seed(0)
    seen = torch.zeros(50, dtype=torch.bool)
    for _ in range(200):
        seen[sample_candidates(targets, n_items=50, negatives=10, generator=g)] = True
    assert seen.all()


def test_a_covered_catalogue_is_every_item():
    assert sample_candidates(torch.tensor([1, 2]), n_items=6, negatives=4).tolist() == list(range(6))
    assert sample_candidates(torch.tensor([1, 2]), n_items=6, negatives=100).tolist() == list(range(6))


def test_loss_is_the_dense_bce_restricted_to_the_candidates():
    config = DINConfig(dim=4, attention_hidden=[5], hidden=[6, 3], max_len=3, train_negatives=1)  # 6 targets of 8
    torch.manual_seed(0)
    model = SPEC.build(TINY_ITEMS, config).double().train()  # PReLU: train = eval mode
    batch = tiny_batch(SPEC, config)
    torch.manual_seed(3)
    scores = model(batch)  # [B, C']
    candidates = model.candidates
    assert candidates is not None and scores.shape == (4, len(candidates)) and len(candidates) < TINY_ITEMS
    assert set(batch.target_items.tolist()) <= set(candidates.tolist())
    loss = SPEC.loss(model, batch, scores, config)
    loss.backward()
    fast = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # Reference: every user's dense scores item by item, then BCE over the candidate columns.
    dense = torch.stack([din_scores(model, h) for h in histories(config.max_len)])  # [B, I]
    y = multi_hot(batch.target_items, batch.target_offsets, TINY_ITEMS).double()[:, candidates]
    s = dense[:, candidates]
    ref = -(y * torch.log(torch.sigmoid(s)) + (1 - y) * torch.log(1 - torch.sigmoid(s))).mean()
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12)
    ref.backward()
    for g, p in zip(fast, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-11)
    # Whole catalogue covered (more negatives than the rest): the plain whole-catalogue loss.
    model.train_negatives = 100
    full = model(batch)
    assert model.candidates is None and full.shape == (4, TINY_ITEMS)
    y_all = multi_hot(batch.target_items, batch.target_offsets, TINY_ITEMS).double()
    torch.testing.assert_close(SPEC.loss(model, batch, full, config), F.binary_cross_entropy_with_logits(full, y_all))


def test_inference_scores_the_whole_catalogue():
    config = DINConfig(dim=4, attention_hidden=[5], hidden=[6], max_len=3, train_negatives=1)
    model = SPEC.build(TINY_ITEMS, config).eval()
    assert model(tiny_batch(SPEC, config)).shape == (4, TINY_ITEMS) and model.candidates is None


def test_learns_a_planted_signal_on_sampled_candidates():
    config = DINConfig(dim=8, attention_hidden=[8], hidden=[16], lr=1e-2, batch_size=8, max_len=8, train_negatives=4)
    recall, popularity, losses = model_vs_popularity(SPEC, config, epochs=8)
    assert recall > popularity + 0.1, (recall, popularity)
