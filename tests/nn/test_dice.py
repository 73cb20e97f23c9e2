"""Dice and PReLU over the last dimension (``nn/dice.py``) against their formulas written out."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.dice import Dice, PReLU

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_dice_in_training_uses_the_batch_statistics():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, dtype=torch.float64)  # statistics over every leading dimension
    dice = Dice(5, eps=1e-8, momentum=0.1).double().train()
    with torch.no_grad():
        dice.alpha.copy_(torch.linspace(-1, 1, 5))
    flat = x.reshape(-1, 5)
    mean, var = flat.mean(0), flat.var(0, unbiased=False)
    p = torch.sigmoid((x - mean) / torch.sqrt(var + 1e-8))
    torch.testing.assert_close(dice(x), p * x + (1 - p) * dice.alpha * x)
    # moving averages: momentum 0.1 of the batch, unbiased variance, as BatchNorm keeps them
    torch.testing.assert_close(dice.running_mean, 0.1 * mean)
    torch.testing.assert_close(dice.running_var, 0.9 + 0.1 * flat.var(0, unbiased=True))


def test_dice_at_inference_uses_the_moving_averages():
    dice = Dice(2).double().eval()
    with torch.no_grad():
        dice.running_mean.copy_(torch.tensor([1.0, -1.0]))
        dice.running_var.copy_(torch.tensor([4.0, 0.25]))
        dice.alpha.copy_(torch.tensor([0.5, 0.0]))
    x = torch.tensor([[3.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    p = torch.sigmoid((x - dice.running_mean) / torch.sqrt(dice.running_var + dice.eps))
    torch.testing.assert_close(dice(x), p * x + (1 - p) * dice.alpha * x)


def test_dice_starts_as_a_smoothed_relu():
    assert torch.equal(Dice(3).alpha, torch.zeros(3))


def test_prelu_is_the_select_with_its_gradient():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 4, 6, dtype=torch.float64, requires_grad=True)
    act = PReLU(6).double()
    assert torch.equal(act.alpha, torch.full((6,), 0.25, dtype=torch.float64))
    with torch.no_grad():
        act.alpha.copy_(torch.linspace(-0.5, 0.5, 6))
    y = act(x)
    reference = torch.where(x > 0, x, act.alpha * x)
    assert torch.equal(y, reference)
    g = torch.randn_like(y)
    (gx, ga) = torch.autograd.grad(y, (x, act.alpha), g)
    (rx, ra) = torch.autograd.grad(reference, (x, act.alpha), g)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(ga, ra)
