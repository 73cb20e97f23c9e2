"""The multi-label training losses, by hand and against torch's own."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.losses import (
    bpr_loss,
    compute_loss,
    multi_hot,
    soft_margin_loss,
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
