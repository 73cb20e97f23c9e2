"""Weighted graph convolution over per-user co-occurrence graphs (MODEL.md §1).

    h_j = Lin( sum_i w(i, j) * x_i )          (Lin with bias; no degree normalisation)

followed by BatchNorm over the feature dimension and ReLU, as published. The graph holds one
node per real node-timestamp of the batch, so BatchNorm statistics cover real node-timestamps
only (no padding exists at this stage).
"""

from __future__ import annotations

import dgl
import dgl.function as fn
import torch
from torch import nn


class WeightedGraphConv(nn.Module):
    """One weighted convolution: ``h_j = Lin(sum_i w_ij x_i)``, then BatchNorm and ReLU.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        dropout: dropout on the output (0 = none, as published).

    Shapes: graph with edata["w"] [E]; x [num_nodes, in_dim] -> [num_nodes, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.norm = nn.BatchNorm1d(out_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor) -> torch.Tensor:
        with graph.local_scope():
            graph.ndata["x"] = x
            graph.update_all(fn.u_mul_e("x", "w", "m"), fn.sum("m", "agg"))
            agg = graph.ndata["agg"]  # [num_nodes, in_dim]
        return self.dropout(torch.relu(self.norm(self.linear(agg))))


class WeightedGCN(nn.Module):
    """A stack of :class:`WeightedGraphConv` layers (the authors use two, d -> d -> d).

    Shapes: x [num_nodes, dim] -> [num_nodes, dim].
    """

    def __init__(self, dim: int, num_layers: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            WeightedGraphConv(dim, dim, dropout) for _ in range(num_layers)
        )

    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(graph, x)
        return x
