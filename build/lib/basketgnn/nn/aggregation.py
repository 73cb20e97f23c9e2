"""Compressing each node's temporal sequence into one vector (DNNTSP's temporal step, its last part)."""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.nn.masks import length_mask


def aggregate_nodes_temporal_feature(
    z: torch.Tensor, lengths: torch.Tensor, w_agg: torch.Tensor
) -> torch.Tensor:
    """Learned temporal aggregation, as the DNNTSP authors compute it:

        a_t = Z_t . w_agg   (no softmax)        z = sum_{t < T_u} a_t Z_t

    using only each node's own T_u real timestamps, for all nodes of all users at once.

    Shapes: z [nodes, T_max, d], lengths [nodes], w_agg [d] -> [nodes, d].
    """
    mask = length_mask(lengths, z.shape[1]).to(z.dtype)  # [nodes, T_max]
    a = (z @ w_agg) * mask  # [nodes, T_max]
    return torch.einsum("nt,ntd->nd", a, z)


def last_timestamp(z: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Z at each node's last real timestamp. Shapes: [nodes, T_max, d], [nodes] -> [nodes, d]."""
    return z[torch.arange(len(z), device=z.device), lengths - 1]


def mean_over_time(z: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean of Z over each node's real timestamps. Shapes: [nodes, T_max, d], [nodes] -> [nodes, d]."""
    mask = length_mask(lengths, z.shape[1]).to(z.dtype)
    return torch.einsum("nt,ntd->nd", mask, z) / lengths.unsqueeze(1).to(z.dtype)


class TemporalAggregation(nn.Module):
    """Holds w_agg for :func:`aggregate_nodes_temporal_feature`, or applies a fixed reduction.

    Args:
        dim: feature size d.
        mode: "learned" (w_agg), "last" (last real timestamp) or "mean" (mean over time).

    Shapes: z [nodes, T_max, d], lengths [nodes] -> [nodes, d].
    """

    def __init__(self, dim: int, mode: str = "learned") -> None:
        super().__init__()
        if mode not in ("learned", "last", "mean"):
            raise ValueError(f"unknown aggregation {mode!r}")
        self.mode = mode
        # Initialised like a Linear(d, 1) weight (uniform +-1/sqrt(d)).
        bound = dim**-0.5
        self.w_agg = nn.Parameter(torch.empty(dim).uniform_(-bound, bound)) if mode == "learned" else None

    def forward(self, z: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.mode == "learned":
            assert self.w_agg is not None
            return aggregate_nodes_temporal_feature(z, lengths, self.w_agg)
        if self.mode == "last":
            return last_timestamp(z, lengths)
        return mean_over_time(z, lengths)
