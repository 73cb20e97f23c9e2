"""The gated scorer (DNNTSP's third step) with the per-item prior bias: against the dense [B, I, d]
formula, and the prior initialisation (logits start at each item's log-odds)."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.gated_scorer import GatedScorer

N_ITEMS, D = 7, 4


def _dense_scores(scorer: GatedScorer, E, z, node_item, node_user, B) -> torch.Tensor:
    """ê_i = (1 - α_i) E_i + α_i z_{u,i} on own items, E_i elsewhere; y = w_o . ê + b_o + b_i,
    built as the full [B, I, d] tensor."""
    e_hat = E.unsqueeze(0).repeat(B, 1, 1)  # [B, I, d]
    alpha = scorer.alpha
    for m in range(len(node_item)):
        u, i = int(node_user[m]), int(node_item[m])
        e_hat[u, i] = (1 - alpha[i]) * E[i] + alpha[i] * z[m]
    y = e_hat @ scorer.out.weight.squeeze(0) + scorer.out.bias  # [B, I]
    return y + scorer.item_bias if scorer.item_bias is not None else y


@pytest.mark.parametrize("item_bias", [False, True])
def test_scores_equal_the_dense_formula(item_bias):
    torch.manual_seed(0)
    scorer = GatedScorer(N_ITEMS, D, item_bias=item_bias).double()
    if item_bias:
        scorer.set_item_prior(torch.rand(N_ITEMS, dtype=torch.float64))
        with torch.no_grad():
            scorer.out.bias.fill_(0.3)  # b_o and b_i both take part
    E = torch.randn(N_ITEMS, D, dtype=torch.float64)
    node_item, node_user = torch.tensor([0, 3, 3, 6]), torch.tensor([0, 0, 1, 2])
    z = torch.randn(4, D, dtype=torch.float64)
    fast = scorer(E, z, node_item, node_user, 3)
    torch.testing.assert_close(fast, _dense_scores(scorer, E, z, node_item, node_user, 3))


def test_item_prior_starts_every_logit_at_the_items_log_odds():
    torch.manual_seed(1)
    freq = torch.tensor([0.5, 0.1, 0.0, 0.01, 1.0, 0.2, 0.05], dtype=torch.float64)
    scorer = GatedScorer(N_ITEMS, D, item_bias=True).double()
    scorer.set_item_prior(freq, smoothing=1e-3)
    with torch.no_grad():
        scorer.out.weight.zero_()  # w_o . E and w_o . z vanish: only the biases remain
    E, z = torch.randn(N_ITEMS, D, dtype=torch.float64), torch.randn(2, D, dtype=torch.float64)
    scores = scorer(E, z, torch.tensor([1, 4]), torch.tensor([0, 1]), 2)
    expected = freq.clamp(1e-3, 1 - 1e-3).expand(2, N_ITEMS)
    torch.testing.assert_close(torch.sigmoid(scores), expected)
    assert scorer.out.bias.item() == 0.0


def test_item_prior_needs_the_item_bias():
    with pytest.raises(ValueError, match="item_bias=True"):
        GatedScorer(N_ITEMS, D).set_item_prior(torch.full((N_ITEMS,), 0.1))


@pytest.mark.parametrize("repeat", [False, True])
def test_node_scores_are_the_forward_matrix_bit_for_bit(repeat):
    """base everywhere except each user-node's own entry: exactly forward's float32 values."""
    torch.manual_seed(1)
    scorer = GatedScorer(N_ITEMS, D, repeat_features=repeat, item_bias=True)
    with torch.no_grad():
        scorer.item_bias.normal_()
        if repeat:
            scorer.repeat.normal_()
    E = torch.randn(N_ITEMS, D)
    node_item, node_user = torch.tensor([0, 3, 3, 6, 1]), torch.tensor([0, 0, 1, 2, 2])
    z = torch.randn(5, D)
    features = torch.randn(5, 4) if repeat else None
    dense = scorer(E, z, node_item, node_user, 4, features)  # [4, I]; user 3 has no items
    base, node = scorer.node_scores(E, scorer.project(z), node_item, features)
    expect = base.expand(4, -1).clone()
    expect[node_user, node_item] = node
    assert torch.equal(dense, expect)


def test_forward_from_each_nodes_output_without_z():
    """forward with z_out (w_o . z computed by the caller) and no z: the same matrix, bit for
    bit; a per-user term outside the history needs z."""
    torch.manual_seed(2)
    scorer = GatedScorer(N_ITEMS, D, repeat_features=True)
    with torch.no_grad():
        scorer.repeat.normal_()
    E, z = torch.randn(N_ITEMS, D), torch.randn(5, D)
    node_item, node_user = torch.tensor([0, 3, 3, 6, 1]), torch.tensor([0, 0, 1, 2, 2])
    features = torch.randn(5, 4)
    want = scorer(E, z, node_item, node_user, 4, features)
    assert torch.equal(scorer(E, None, node_item, node_user, 4, features, z_out=scorer.project(z)), want)
    context = GatedScorer(N_ITEMS, D, user_context=True)
    with pytest.raises(AssertionError, match="read z"):
        context(E, None, node_item, node_user, 4, None, z_out=context.project(z))


def test_node_scores_refuse_a_per_user_term_outside_the_history():
    scorer = GatedScorer(N_ITEMS, D, user_context=True)
    assert not scorer.shared_outside_history
    with pytest.raises(ValueError, match="without user_context"):
        scorer.node_scores(torch.randn(N_ITEMS, D), torch.randn(2), torch.tensor([0, 1]))
