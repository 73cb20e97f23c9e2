"""Temporal readouts (``nn/aggregation.py``) against plain loops over each node's real
timestamps: padding never counts."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.aggregation import (
    TemporalAggregation,
    aggregate_nodes_temporal_feature,
    last_timestamp,
    mean_over_time,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def sequences():
    torch.manual_seed(0)
    z = torch.randn(4, 5, 3, dtype=torch.float64)  # [nodes, T_max, d]
    lengths = torch.tensor([5, 1, 3, 2])
    return z, lengths


def _with_other_padding(z, lengths):
    z = z.clone()
    for n, L in enumerate(lengths.tolist()):
        z[n, L:] = 1e6  # anything: padding must not matter
    return z


def test_learned_readout_against_a_loop(sequences):
    z, lengths = sequences
    w = torch.randn(3, dtype=torch.float64)
    out = aggregate_nodes_temporal_feature(z, lengths, w)
    for n, L in enumerate(lengths.tolist()):
        expected = sum((z[n, t] @ w) * z[n, t] for t in range(L))  # a_t = Z_t . w, no softmax
        torch.testing.assert_close(out[n], expected)
    torch.testing.assert_close(aggregate_nodes_temporal_feature(_with_other_padding(z, lengths), lengths, w), out)


def test_last_and_mean_against_a_loop(sequences):
    z, lengths = sequences
    last, mean = last_timestamp(z, lengths), mean_over_time(z, lengths)
    for n, L in enumerate(lengths.tolist()):
        torch.testing.assert_close(last[n], z[n, L - 1])
        torch.testing.assert_close(mean[n], z[n, :L].mean(0))
    torch.testing.assert_close(mean_over_time(_with_other_padding(z, lengths), lengths), mean)


@pytest.mark.parametrize("mode", ["learned", "last", "mean"])
def test_module_modes(sequences, mode):
    z, lengths = sequences
    agg = TemporalAggregation(3, mode).double()
    expected = {
        "learned": lambda: aggregate_nodes_temporal_feature(z, lengths, agg.w_agg),
        "last": lambda: last_timestamp(z, lengths),
        "mean": lambda: mean_over_time(z, lengths),
    }[mode]()
    torch.testing.assert_close(agg(z, lengths), expected)
    assert (agg.w_agg is not None) == (mode == "learned")
    if agg.w_agg is not None:
        assert agg.w_agg.abs().max() <= 3**-0.5  # initialised as a Linear(d, 1) weight


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown aggregation"):
        TemporalAggregation(3, "max")
