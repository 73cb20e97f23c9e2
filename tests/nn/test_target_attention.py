"""DIN's activation unit: a hand-computed case, the per-user reference, padding, Dice."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.dice import Dice, PReLU
from basketgnn.nn.target_attention import TargetAttention, chunk_size, pad_segments
from tests.support.reference_zoo import target_attention


def test_hand_computed_weights_are_not_softmax_normalised():
    # Unit: a = relu-ish(w . [h, t, h - t, h * t]) with one hidden unit, weights set by hand.
    unit = TargetAttention(1, hidden=[1], activation="prelu")
    lin1, act, lin2 = unit.unit
    with torch.no_grad():
        lin1.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 2.0]]))  # h + 2 h t
        lin1.bias.zero_()
        act.alpha.fill_(0.5)
        lin2.weight.fill_(3.0)
        lin2.bias.fill_(1.0)
    history = torch.tensor([[[1.0], [-2.0], [4.0]]])  # one user, three steps
    mask = torch.tensor([[True, True, False]])  # the third step is padding
    target = torch.tensor([[2.0]])
    pooled, a = unit(history, mask, target)
    # h = 1: s = 1 + 4 = 5 -> 5 -> a = 3 * 5 + 1 = 16
    # h = -2: s = -2 - 8 = -10 -> 0.5 * -10 = -5 -> a = -15 + 1 = -14
    # padding -> 0
    assert a.tolist() == [[[16.0, -14.0, 0.0]]]
    assert pooled.tolist() == [[[16.0 * 1 + -14.0 * -2]]]  # 44; a softmax would give a convex mix


@pytest.mark.parametrize("act", ["prelu", "dice"])
def test_matches_reference_outputs_and_gradients(act):
    torch.manual_seed(0)
    unit = TargetAttention(4, hidden=[6, 5], activation=act).double()
    if act == "dice":
        unit.train()
        unit(torch.randn(3, 4, 4, dtype=torch.float64), torch.ones(3, 4, dtype=torch.bool), torch.randn(5, 4, dtype=torch.float64))
    unit.eval()  # Dice uses its moving averages, a per-sample function
    lengths = [2, 4, 1]
    history = torch.randn(3, 4, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(4)[None] < torch.tensor(lengths)[:, None]
    targets = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    pooled, a = unit(history, mask, targets)
    (pooled.sum() + a.sum()).backward()
    grads = [p.grad.clone() for p in unit.parameters()] + [history.grad.clone(), targets.grad.clone()]
    unit.zero_grad()
    history.grad = targets.grad = None
    total = 0
    for u, n in enumerate(lengths):
        for c in range(5):
            ref_pooled, ref_a = target_attention(unit, history[u, :n], targets[c])
            torch.testing.assert_close(pooled[u, c], ref_pooled, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(a[u, c, :n], ref_a, rtol=1e-10, atol=1e-10)
            assert (a[u, c, n:] == 0).all()
            total = total + ref_pooled.sum() + ref_a.sum()
    total.backward()
    for fast, ref in zip(grads, [p.grad for p in unit.parameters()] + [history.grad, targets.grad]):
        torch.testing.assert_close(fast, ref, rtol=1e-9, atol=1e-10)


def test_real_outputs_unchanged_by_more_padding():
    torch.manual_seed(2)
    unit = TargetAttention(3, hidden=[4]).double().eval()
    history = torch.randn(2, 3, 3, dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    targets = torch.randn(4, 3, dtype=torch.float64)
    padded = torch.cat([history, torch.randn(2, 4, 3, dtype=torch.float64)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(unit(history, mask, targets)[0], unit(padded, padded_mask, targets)[0])


def test_dice_formula_in_training_and_inference():
    dice = Dice(2).double()
    with torch.no_grad():
        dice.alpha.copy_(torch.tensor([0.5, -1.0]))
    x = torch.tensor([[1.0, 2.0], [3.0, -2.0], [-4.0, 0.0]], dtype=torch.float64)
    mean, var = x.mean(0), x.var(0, unbiased=False)
    p = torch.sigmoid((x - mean) / torch.sqrt(var + dice.eps))
    torch.testing.assert_close(dice(x), p * x + (1 - p) * dice.alpha * x)
    # Moving averages after one step (momentum 0.1, unbiased variance as BatchNorm keeps it).
    torch.testing.assert_close(dice.running_mean, 0.1 * mean)
    torch.testing.assert_close(dice.running_var, 0.9 + 0.1 * x.var(0, unbiased=True))
    dice.eval()
    p = torch.sigmoid((x - dice.running_mean) / torch.sqrt(dice.running_var + dice.eps))
    torch.testing.assert_close(dice(x), p * x + (1 - p) * dice.alpha * x)


def test_prelu_on_last_dimension():
    act = PReLU(2)
    with torch.no_grad():
        act.alpha.copy_(torch.tensor([0.1, 2.0]))
    x = torch.tensor([[[-1.0, -1.0], [3.0, 4.0]]])
    assert torch.allclose(act(x), torch.tensor([[[-0.1, -2.0], [3.0, 4.0]]]))


def test_chunk_size_bounds_the_attention_input():
    assert chunk_size(batch=2, steps=5, dim=4, max_elements=400) == 400 // (2 * 5 * 16)
    assert chunk_size(batch=64, steps=20, dim=32, max_elements=10) == 1  # at least one target


def test_pad_segments_docstring_example():
    values = torch.tensor([[1.0], [2.0], [3.0]])
    padded, mask = pad_segments(values, torch.tensor([1, 0, 1]), 3)
    assert padded.tolist() == [[[2.0], [0.0]], [[1.0], [3.0]], [[0.0], [0.0]]]
    assert mask.tolist() == [[True, False], [True, True], [False, False]]


def test_prelu_matches_the_select_formula_outputs_and_gradients():
    torch.manual_seed(0)
    act = PReLU(5).double()
    with torch.no_grad():
        act.alpha.copy_(torch.randn(5, dtype=torch.float64))
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    x.data[0, 0, 0] = 0.0  # the kink itself
    g = torch.randn(3, 4, 5, dtype=torch.float64)
    act(x).backward(g)
    fast = (x.grad.clone(), act.alpha.grad.clone())
    x.grad = act.alpha.grad = None
    ref = torch.where(x > 0, x, act.alpha * x)
    torch.testing.assert_close(act(x), ref, rtol=0, atol=0)
    ref.backward(g)
    torch.testing.assert_close(fast[0], x.grad)
    torch.testing.assert_close(fast[1], act.alpha.grad)
