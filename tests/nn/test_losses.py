"""The multi-label training losses, by hand and against torch's own."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.losses import (
    bpr_loss,
    compute_loss,
    multi_hot,
    soft_margin_loss,
    soft_margin_loss_shared,
    weighted_mse_loss,
)


def test_multi_hot_marks_each_target_basket():
    y = multi_hot(torch.tensor([0, 2, 1]), torch.tensor([0, 2, 3]), 4)
    assert y.tolist() == [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]]


def test_bpr_and_mse_by_hand():
    scores = torch.tensor([[2.0, 0.0, -1.0]])
    y = multi_hot(torch.tensor([0]), torch.tensor([0, 1]), 3)
    # negatives are items 1 or 2: -log sigmoid(2 - 0) = 0.1269, -log sigmoid(3) = 0.0486
    assert bpr_loss(scores, y).item() in (pytest.approx(0.126928, abs=1e-5), pytest.approx(0.048587, abs=1e-5))
    # weights: positive 2/1 = 2, negatives 1; mean of [2 (s(2)-1)^2, s(0)^2, s(-1)^2]
    s = torch.sigmoid(scores)[0]
    expected = (2 * (s[0] - 1) ** 2 + s[1] ** 2 + s[2] ** 2) / 3
    assert weighted_mse_loss(scores, y).item() == pytest.approx(expected.item())


def test_soft_margin_equals_torchs_multilabel_soft_margin():
    torch.manual_seed(0)
    scores = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    y = (torch.rand(5, 7) < 0.3).double()
    ours = soft_margin_loss(scores, y)
    (g_ours,) = torch.autograd.grad(ours, scores)
    theirs = torch.nn.functional.multilabel_soft_margin_loss(scores, y)
    (g_theirs,) = torch.autograd.grad(theirs, scores)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    torch.testing.assert_close(g_ours, g_theirs)


@pytest.mark.parametrize("name, fn", [("softmargin", soft_margin_loss), ("mse", weighted_mse_loss)])
def test_compute_loss_dispatches_by_name(name, fn):
    torch.manual_seed(1)
    scores, y = torch.randn(3, 5), (torch.rand(3, 5) < 0.4).float()
    assert compute_loss(name, scores, y).item() == pytest.approx(fn(scores, y).item())


@pytest.mark.parametrize("seed", range(12))
def test_shared_soft_margin_equals_the_dense_loss_and_its_gradients(seed):
    """Random shared-form scores (entries in random order, users without entries or targets,
    targets repeated within a basket) against the dense [B, I] matrix they stand for, float64."""
    g = torch.Generator().manual_seed(seed)
    B, n_items = int(torch.randint(1, 8, (), generator=g)), int(torch.randint(2, 40, (), generator=g))
    pairs = torch.unique(torch.randint(0, B * n_items, (int(torch.randint(0, B * n_items, (), generator=g)),), generator=g))
    pairs = pairs[torch.randperm(len(pairs), generator=g)]
    row, item = pairs // n_items, pairs % n_items
    lens = torch.randint(0, 5, (B,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
    targets = torch.randint(0, n_items, (int(offsets[-1]),), generator=g)
    base = (3 * torch.randn(n_items, dtype=torch.float64, generator=g)).requires_grad_()
    value = (3 * torch.randn(len(pairs), dtype=torch.float64, generator=g)).requires_grad_()
    dense = base.expand(B, -1).clone()
    dense[row, item] = value
    ref = soft_margin_loss(dense, multi_hot(targets, offsets, n_items).double())
    got = soft_margin_loss_shared(base, value, row, item, targets, offsets)
    assert got.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-15)
    for a, b in zip(torch.autograd.grad(got, (base, value)), torch.autograd.grad(ref, (base, value))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-15)


def test_shared_soft_margin_by_hand():
    # B = 2, I = 2; user 0 scores item 1 at 2.0 (its entry), everything else is base = [0, -1].
    # Targets: user 0 item 1, user 1 item 0 (twice in its basket: counts once).
    base, value = torch.tensor([0.0, -1.0]), torch.tensor([2.0])
    got = soft_margin_loss_shared(base, value, torch.tensor([0]), torch.tensor([1]),
                                  torch.tensor([1, 0, 0]), torch.tensor([0, 1, 3]))  # fmt: skip
    sp = torch.nn.functional.softplus
    # x = [[0, 2], [0, -1]], y = [[0, 1], [1, 0]]
    expected = (sp(torch.tensor(0.0)) + sp(torch.tensor(2.0)) - 2 + sp(torch.tensor(0.0)) - 0 + sp(torch.tensor(-1.0))) / 4
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)
