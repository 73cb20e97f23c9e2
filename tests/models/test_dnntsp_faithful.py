"""The fast, batched DNNTSP computes exactly what MODEL.md says: same scores and same gradients
as the dense loop reference in ``tests/support/reference_dnntsp.py``, for every model switch, in
train and eval mode, on edge-case users; real outputs do not depend on padding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import GraphBatch, build_user_graphs
from basketgnn.models.dnntsp import DNNTSP
from basketgnn.nn.aggregation import aggregate_nodes_temporal_feature
from tests.support.reference_dnntsp import reference_scores

N_ITEMS = 12
DIM = 8
ATOL = 1e-5

ONE_BASKET = [[3, 7, 1]]  # T = 1
LONG = [[0, 1], [0, 2, 5], [0], [0, 9, 1], [0, 3], [0, 2], [0, 11, 4, 6], [0, 1]]  # T = 8, 0 always
SINGLES = [[4], [5], [4], [6]]  # single-item baskets: no item is ever co-bought
REPEATED = [[2, 2, 8], [8, 8], [2, 3, 3]]  # repeated ids inside baskets count once
ONE_ITEM = [[10]]  # T = 1, N = 1


def _random_users(seed: int, n_users: int, max_len: int = 5) -> list[list[list[int]]]:
    rng = np.random.default_rng(seed)
    users = []
    for _ in range(n_users):
        T = int(rng.integers(1, max_len + 1))
        users.append(
            [
                rng.choice(N_ITEMS, size=int(rng.integers(1, 5)), replace=False).tolist()
                for _ in range(T)
            ]
        )
    return users


BATCHES = {
    "edge_cases": [ONE_BASKET, LONG, SINGLES, REPEATED, ONE_ITEM],
    "T1_and_T8": [ONE_BASKET, LONG],
    "random": _random_users(seed=3, n_users=5),
}

SWITCHES = {
    "default": {},
    "gcn_off": {"gcn": False},
    "attention_off": {"attention": False},
    "gcn_and_attention_off": {"gcn": False, "attention": False},
    "aggregation_last": {"aggregation": "last"},
    "gate_fixed": {"gate": "fixed"},
    "gate_off": {"gate": "off"},
    "head_merge_mean": {"head_merge": "mean"},
    "gcn_layers_1": {"gcn_layers": 1},
    "gcn_layers_3": {"gcn_layers": 3},
    "presence": {"presence": True},
    "presence_gcn_off": {"presence": True, "gcn": False},
    "repeat_features": {"repeat_features": True},
    "membership": {"repeat_features": True, "membership_steps": 3},
    "membership_longer_than_history": {"repeat_features": True, "membership_steps": 10},
    "user_context": {"user_context": True},
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_batch(
    histories: list[list[list[int]]], dtype: torch.dtype = torch.float64, form: str = "factored"
) -> GraphBatch:
    """One GraphBatch holding every history in full (instance k = user k, T = its length)."""
    data = from_sequences(histories, n_items=N_ITEMS)
    instances = Instances(np.arange(len(histories)), np.asarray([len(h) for h in histories]))
    batch = build_user_graphs(data, instances, with_targets=False, form=form).collate(
        np.arange(len(histories)), with_targets=False
    )
    if batch.graph is not None:
        batch.graph.edata["w"] = batch.graph.edata["w"].to(dtype)
    return batch


def make_model(seed: int = 0, dtype: torch.dtype = torch.float64, **switches) -> DNNTSP:
    """A small model whose BatchNorm affine parameters and running statistics are not trivial."""
    torch.manual_seed(seed)
    model = DNNTSP(N_ITEMS, embed_dim=DIM, heads=4, **switches).to(dtype)
    with torch.no_grad():
        if model.gcn is not None:
            for layer in model.gcn.layers:
                layer.norm.weight.uniform_(0.5, 1.5)
                layer.norm.bias.normal_(0.0, 0.3)
                layer.norm.running_mean.normal_(0.0, 0.3)
                layer.norm.running_var.uniform_(0.5, 2.0)
        model.scorer.out.bias.normal_()
        if model.presence is not None:
            model.presence.normal_()
        if model.scorer.repeat is not None:
            model.scorer.repeat.normal_()
        if model.scorer.context is not None:
            model.scorer.context.normal_()
    return model


def _grads(loss: torch.Tensor, model: DNNTSP) -> dict[str, torch.Tensor]:
    names, params = zip(*model.named_parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return {n: torch.zeros_like(p) if g is None else g for n, p, g in zip(names, params, grads)}


@pytest.mark.parametrize("form", ["factored", "edges"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("batch_name", list(BATCHES))
@pytest.mark.parametrize("switch", list(SWITCHES))
def test_scores_and_gradients_match_reference(switch: str, batch_name: str, mode: str, form: str) -> None:
    histories = BATCHES[batch_name]
    model = make_model(**SWITCHES[switch])
    model.train(mode == "train")
    batch = make_batch(histories, form=form)
    weights = torch.randn(
        len(histories), N_ITEMS, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )

    fast = model(batch)
    ref = reference_scores(model, histories)
    assert fast.shape == ref.shape == (len(histories), N_ITEMS)
    torch.testing.assert_close(fast, ref, atol=ATOL, rtol=0)

    g_fast = _grads((fast * weights).sum(), model)
    g_ref = _grads((ref * weights).sum(), model)
    for name in g_fast:
        torch.testing.assert_close(g_fast[name], g_ref[name], atol=ATOL, rtol=0, msg=name)
        # Every parameter takes part (the comparison is not vacuous).
        assert g_ref[name].abs().sum() > 0, name


@pytest.mark.parametrize("form", ["factored", "edges"])
@pytest.mark.parametrize("switch", list(SWITCHES))
def test_float64_agreement_is_exact(switch: str, form: str) -> None:
    """The edge list stores c / max c as float32 (e.g. 1/3), so against exact weights float64
    scores differ by ~1e-8; with the reference's weights rounded the same way, scores and
    gradients agree to float64 rounding error: nothing else differs (not even a BatchNorm eps).
    The factored form keeps counts and 1 / max c in float64, so it agrees with exact weights."""
    histories = BATCHES["edge_cases"] + BATCHES["random"]
    model = make_model(**SWITCHES[switch])
    weight_dtype = torch.float32 if form == "edges" else torch.float64
    for train in (True, False):
        model.train(train)
        fast = model(make_batch(histories, form=form))
        ref = reference_scores(model, histories, weight_dtype=weight_dtype)
        torch.testing.assert_close(fast, ref, atol=1e-11, rtol=0)
        weights = torch.randn(
            fast.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
        )
        g_fast = _grads((fast * weights).sum(), model)
        g_ref = _grads((ref * weights).sum(), model)
        for name in g_fast:
            torch.testing.assert_close(g_fast[name], g_ref[name], atol=1e-10, rtol=0, msg=name)


def test_float32_matches_reference() -> None:
    """The production dtype agrees too, to float32 precision."""
    histories = BATCHES["edge_cases"]
    model = make_model(dtype=torch.float32)
    for train in (True, False):
        model.train(train)
        fast = model(make_batch(histories, torch.float32))
        torch.testing.assert_close(fast, reference_scores(model, histories), atol=1e-4, rtol=0)


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_scores_do_not_change_with_padding(switch: str) -> None:
    """A short user scores the same alone and next to a much longer one (eval mode: train-mode
    BatchNorm couples the users of a batch by design)."""
    model = make_model(**SWITCHES[switch]).eval()
    short = [[1, 3], [3], [2, 3, 7]]
    with torch.no_grad():
        alone = model(make_batch([short]))[0]
        after_long = model(make_batch([LONG, short]))[1]
        before_long = model(make_batch([short, LONG, _random_users(7, 1, max_len=1)[0]]))[0]
    torch.testing.assert_close(after_long, alone, atol=1e-12, rtol=0)
    torch.testing.assert_close(before_long, alone, atol=1e-12, rtol=0)


def test_aggregate_nodes_temporal_feature_matches_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    n, T_max, d = 5, 6, 4
    lengths = torch.tensor([1, 6, 3, 2, 6])
    z = torch.randn(n, T_max, d, dtype=torch.float64, generator=gen)
    w_agg = torch.randn(d, dtype=torch.float64, generator=gen)

    expected = torch.zeros(n, d, dtype=torch.float64)
    for node in range(n):
        for t in range(int(lengths[node])):
            a_t = sum(float(z[node, t, k]) * float(w_agg[k]) for k in range(d))  # no softmax
            expected[node] += a_t * z[node, t]
    torch.testing.assert_close(aggregate_nodes_temporal_feature(z, lengths, w_agg), expected)

    # Whatever sits in the padding is ignored.
    garbage = z.clone()
    for node in range(n):
        garbage[node, int(lengths[node]) :] = 1e6
    torch.testing.assert_close(aggregate_nodes_temporal_feature(garbage, lengths, w_agg), expected)
