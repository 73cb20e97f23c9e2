"""GatedScorer's optional DIN term for items outside the history, against a per-user reference."""

from __future__ import annotations

import numpy as np
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSP
from basketgnn.nn.gated_scorer import GatedScorer
from tests.support.reference_zoo import target_attention


def test_explore_term_matches_reference_and_spares_own_items():
    torch.manual_seed(0)
    n_items, d, B = 7, 4, 3
    scorer = GatedScorer(n_items, d, explore_attention=True).double()
    plain = GatedScorer(n_items, d).double()
    plain.load_state_dict(scorer.state_dict(), strict=False)
    with torch.no_grad():
        scorer.explore_out.normal_()
    embedding = torch.randn(n_items, d, dtype=torch.float64, requires_grad=True)
    node_user = torch.tensor([2, 0, 2, 2, 0])  # user 1 has no history item
    node_item = torch.tensor([1, 4, 0, 6, 3])
    z = torch.randn(5, d, dtype=torch.float64, requires_grad=True)
    scores = scorer(embedding, z, node_item, node_user, B)
    base = plain(embedding, z, node_item, node_user, B)
    for u in range(B):
        own = node_user == u
        for i in range(n_items):
            if own.any() and (node_item[own] == i).any():
                expected = torch.zeros((), dtype=torch.float64)  # own item: DNNTSP's gated score only
            elif own.any():
                pooled, _ = target_attention(scorer.explore, z[own], embedding[i])
                expected = pooled @ scorer.explore_out
            else:
                expected = torch.zeros((), dtype=torch.float64)  # no history: nothing to attend to
            torch.testing.assert_close(scores[u, i] - base[u, i], expected, rtol=1e-10, atol=1e-12)
    scores.sum().backward()
    assert scorer.explore_out.grad.abs().sum() > 0 and z.grad.abs().sum() > 0


def test_dnntsp_starts_as_without_the_switch():
    data = from_sequences([[[0, 1], [2], [1, 3]], [[4], [4, 5]]], n_items=6)
    batch = build_user_graphs(data, Instances(np.array([0, 1]), np.array([3, 2])), with_targets=False).collate(
        np.arange(2), with_targets=False
    )
    torch.manual_seed(0)
    on = DNNTSP(6, embed_dim=8, explore_attention=True).eval()
    torch.manual_seed(0)
    off = DNNTSP(6, embed_dim=8).eval()
    torch.testing.assert_close(on(batch), off(batch))  # w_x starts at 0
    on.train()
    on(batch).sum().backward()
    assert on.scorer.explore_out.grad.abs().sum() > 0
