"""Weighted graph convolution over per-user co-occurrence graphs (DNNTSP's first step).

    h_j = Lin( sum_i w(i, j) * x_i )          (Lin with bias; no degree normalisation)

followed by BatchNorm over the feature dimension and ReLU, as published. Graph nodes are the
distinct rows of :mod:`basketgnn.graph.cooccurrence`, each standing for ``row_weight``
node-timestamps; BatchNorm weights rows by that multiplicity, so its statistics are exactly
those over all real node-timestamps (never padding).

Padded statistics (the authors' code, an option): their batch tensor is [nodes, T_max, d], T_max
the batch's longest history, and a timestamp t >= T_u of user u gets the identity as weights (a
self-loop of weight 1, no other edge); BatchNorm (training mode) takes its statistics over all
nodes x T_max positions. A node's padded positions therefore all hold one chain of its own,
``p_0 = x_i``, ``p_l = ReLU(BN(Lin(p_{l-1})))`` (self weight 1: no ``row_scale``), counted
T_max - T_u times in every layer's statistics; they never reach the node's real outputs (the
attention mask looks back only and the readout reads the real timestamps). ``pad_x`` /
``pad_weight`` of :meth:`WeightedGCN.forward` add those rows.

Inference on the CPU (:meth:`WeightedGCN.forward_gathered`) uses that each layer is linear up
to its ReLU: BatchNorm with its running statistics is a per-feature affine map, folded into the
linear map's weight and bias, and the linear map commutes with the weighted sum,
``Lin'(sum_i w(i, j) x_i) = sum_i w(i, j) (W' x_i) + b'``. The first layer's rows are
``table[index]`` (each item's input vector), so ``W'`` projects the table once, not every row;
the sum, the bias and the ReLU then run in one compiled pass (``nn.gcn_kernel``). The same
values up to float rounding (the products are summed in another order).

The weights come either as a DGL graph with edge weights, or factored
(:class:`~basketgnn.graph.cooccurrence.FactoredAdjacency`):
``sum_i w(i, j) x_i = scale_j * ((B^T (B x))_j + self_j * x_j)`` with two sparse sums over the
entries of B and no co-occurrence edge list (same values; see graph.cooccurrence).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from basketgnn.graph.cooccurrence import FactoredAdjacency, dgl_module
from basketgnn.jit import compiled_inference_applies, compiled_training_applies
from basketgnn.nn import batch_norm_kernel, gcn_kernel

if TYPE_CHECKING:
    import dgl


def state_key(*tensors: torch.Tensor | None) -> tuple[tuple[int, int], ...]:
    """Each tensor's identity and in-place version: the same while none of them is replaced or
    changed in place (an optimizer step, ``load_state_dict``, a BatchNorm update). The tensors
    must not be inference tensors (parameters and buffers are not); None counts as (0, 0)."""
    return tuple((0, 0) if t is None else (id(t), t._version) for t in tensors)


def weighted_sum(graph: dgl.DGLGraph | FactoredAdjacency, x: torch.Tensor, compiled: bool = True) -> torch.Tensor:
    """``sum_i w(i, j) x_i`` for every row j (self weight included). Factored and on the CPU,
    through ``nn.gcn_kernel`` (the same additions in the same order; in training with its
    gradient by the same kernel) unless ``compiled`` is False.

    Shapes: x [rows, C] -> [rows, C].
    """
    if isinstance(graph, FactoredAdjacency):
        a = graph
        if compiled and compiled_inference_applies(x):  # no weights here: only x's gradient
            return gcn_kernel.weighted_sum(x, a.pair_row, a.pair_slot, a.num_slots, a.row_self, a.row_scale)
        if compiled and compiled_training_applies(x):
            return gcn_kernel.weighted_sum_trainable(x, a.pair_row, a.pair_slot, a.num_slots, a.row_self, a.row_scale)
        # [slots, C]: the sum over each slot's rows, then back to the rows of each slot.
        slots = x.new_zeros(a.num_slots, x.shape[1]).index_add(0, a.pair_slot, x.index_select(0, a.pair_row))
        back = torch.zeros_like(x).index_add(0, a.pair_row, slots.index_select(0, a.pair_slot))
        return (back + a.row_self.to(x.dtype).unsqueeze(1) * x) * a.row_scale.to(x.dtype).unsqueeze(1)
    fn = dgl_module().function
    with graph.local_scope():
        graph.ndata["x"] = x
        graph.update_all(fn.u_mul_e("x", "w", "m"), fn.sum("m", "agg"))
        return graph.ndata["agg"]  # [rows, C]


class MultiplicityBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d where row r counts ``weight[r]`` times (0 = not at all).

    Identical to ``nn.BatchNorm1d`` on the expanded rows: biased variance to normalise,
    unbiased (n / (n - 1)) in the running estimate. Same parameters and buffers, so state dicts
    are interchangeable. In training on the CPU the statistics, normalisation and gradient run
    in :mod:`basketgnn.nn.batch_norm_kernel` (equal up to float rounding).

    Shapes: x [rows, C], weight [rows] -> [rows, C].
    """

    #: False: training always takes the tensor path (tests, benchmarks).
    compiled: bool = True

    def forward(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:  # type: ignore[override]
        if weight is None or not self.training:
            return super().forward(x)
        if self.compiled and compiled_training_applies(x):
            return self.forward_compiled(x, weight)
        w = weight.to(x.dtype)  # [rows]
        n = w.sum()
        mean = (w.unsqueeze(1) * x).sum(0) / n  # [C]
        var = (w.unsqueeze(1) * (x - mean) ** 2).sum(0) / n  # [C], biased
        self._track(mean, var, n)
        out = (x - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out

    def forward_compiled(self, x: torch.Tensor, weight: torch.Tensor, relu: bool = False, dropout: float = 0.0) -> torch.Tensor:
        """Training on the CPU through :mod:`basketgnn.nn.batch_norm_kernel`, with ReLU and
        dropout (probability ``dropout`` < 1) after it where asked, in the same passes.

        Shapes: x [rows, C], weight [rows] -> [rows, C].
        """
        w = weight.to(x.dtype)  # [rows]
        affine = (self.weight, self.bias) if self.affine else (None, None)
        out, mean, var = batch_norm_kernel.weighted_batch_norm(x, w, *affine, self.eps, relu, dropout)
        self._track(mean.to(x.dtype), var.to(x.dtype), w.sum())
        return out

    def _track(self, mean: torch.Tensor, var: torch.Tensor, n: torch.Tensor) -> None:
        """The running statistics' update from a batch's mean and biased variance over n rows."""
        if not (self.track_running_stats and self.running_mean is not None):
            return
        with torch.no_grad():
            assert self.running_var is not None and self.num_batches_tracked is not None
            self.num_batches_tracked.add_(1)
            m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
            self.running_mean.mul_(1 - m).add_(m * mean)
            self.running_var.mul_(1 - m).add_(m * var * n / (n - 1).clamp(min=1))


class WeightedGraphConv(nn.Module):
    """One weighted convolution: ``h_j = Lin(sum_i w_ij x_i)``, then BatchNorm and ReLU.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        dropout: dropout on the output (0 = none, as published).

    Shapes: graph with edata["w"] [E] (or factored); x [rows, in_dim]; row_weight [rows] -> [rows, out_dim].
    """

    #: False: the factored sum always takes the tensor path (tests, benchmarks).
    compiled: bool = True

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.norm = MultiplicityBatchNorm1d(out_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        graph: dgl.DGLGraph | FactoredAdjacency,
        x: torch.Tensor,
        row_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        agg = weighted_sum(graph, x, self.compiled)  # [rows, in_dim]
        return self._activate(self.linear(agg), row_weight)

    def _activate(self, z: torch.Tensor, row_weight: torch.Tensor | None) -> torch.Tensor:
        """dropout(ReLU(BatchNorm(z))); with BatchNorm in training on the CPU, in one compiled
        pass. Shapes: z [rows, out_dim], row_weight [rows] -> [rows, out_dim]."""
        p = self.dropout.p if self.dropout.training else 0.0
        if (self.norm.training and row_weight is not None and p < 1 and self.norm.compiled
                and compiled_training_applies(z)):  # fmt: skip
            return self.norm.forward_compiled(z, row_weight, relu=True, dropout=p)
        return self.dropout(torch.relu(self.norm(z, row_weight)))

    def folded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The linear map and BatchNorm (with its running statistics) as one affine map
        ``z -> z W'^T + b'``, for inference. Shapes: -> (W' [out_dim, in_dim], b' [out_dim])."""
        norm = self.norm
        assert norm.running_mean is not None and norm.running_var is not None
        a = torch.rsqrt(norm.running_var + norm.eps)  # [out_dim]
        if norm.affine:
            a = a * norm.weight
        b = (self.linear.bias - norm.running_mean) * a
        if norm.affine:
            b = b + norm.bias
        return self.linear.weight * a.unsqueeze(1), b

    def forward_padded(
        self,
        graph: dgl.DGLGraph | FactoredAdjacency,
        x: torch.Tensor,
        row_weight: torch.Tensor,
        pad_x: torch.Tensor,
        pad_weight: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` of the rows, with padded rows ``pad_x`` (self weight 1, no other
        edge) counted ``pad_weight`` times in BatchNorm's statistics (module docstring).

        Shapes: pad_x [P, in_dim], pad_weight [P] -> ([rows, out_dim], [P, out_dim]).
        """
        agg = torch.cat([weighted_sum(graph, x, self.compiled), pad_x])  # [rows + P, in_dim]
        out = self._activate(self.linear(agg), torch.cat([row_weight.to(agg.dtype), pad_weight.to(agg.dtype)]))
        return out[: len(x)], out[len(x) :]


class WeightedGCN(nn.Module):
    """A stack of :class:`WeightedGraphConv` layers (the authors use two, d -> d -> d).

    Shapes: x [rows, dim], row_weight [rows] -> [rows, dim].
    """

    #: False: :meth:`forward_gathered` always runs the layers as :meth:`forward` (benchmarks).
    folded_inference: bool = True

    def __init__(self, dim: int, num_layers: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            WeightedGraphConv(dim, dim, dropout) for _ in range(num_layers)
        )
        # forward_gathered's folded maps and projected table: (key, [K, dim], [(W', b')]).
        self._fold_cache: tuple[Any, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]] | None = None

    def forward_gathered(
        self,
        graph: dgl.DGLGraph | FactoredAdjacency,
        table: torch.Tensor,
        index: torch.Tensor,
        table_key: tuple[Any, ...] | None = None,
    ) -> torch.Tensor:
        """:meth:`forward` (in eval mode: no row weights) of the rows ``x = table[index]``; on the CPU with the
        factored graph, each layer's BatchNorm folded into its linear map, applied before the
        sum (the first layer's to the table), and the sum, bias and ReLU in one compiled pass
        (module docstring; equal up to float rounding). ``table_key``: a key that changes
        whenever ``table``'s values may (:func:`state_key` of what it is made from); with it, the
        folded maps and the projected table are kept for the next batches while neither the key
        nor this module's parameters and buffers change.

        Shapes: table [K, dim]; index [R] int64 -> [R, dim].
        """
        if not self._folded_applies(graph, table):
            return self(graph, table.index_select(0, index))
        assert isinstance(graph, FactoredAdjacency)
        key = None if table_key is None else (table_key, state_key(*self.parameters(), *self.buffers()))
        cached = self._fold_cache
        if key is None or cached is None or cached[0] != key:
            folded = [layer.folded() for layer in self.layers]
            cached = (key, torch.nn.functional.linear(table, folded[0][0]), folded)
            if key is not None:
                self._fold_cache = cached
        a, y, gather = graph, cached[1], index
        for i, (weight, bias) in enumerate(cached[2]):
            if i > 0:
                y = torch.nn.functional.linear(y, weight)
            y = gcn_kernel.projected_sum(y, gather, a.pair_row, a.pair_slot, a.num_slots, a.row_self, a.row_scale, bias)
            gather = None
        return y

    def _folded_applies(self, graph: dgl.DGLGraph | FactoredAdjacency, x: torch.Tensor) -> bool:
        if self.training or not self.folded_inference or not isinstance(graph, FactoredAdjacency):
            return False
        params = [p for layer in self.layers for p in layer.parameters()]
        return all(
            layer.compiled and not layer.norm.training and layer.norm.track_running_stats
            and layer.norm.running_mean is not None for layer in self.layers
        ) and compiled_inference_applies(x, *params)  # fmt: skip

    def forward(
        self,
        graph: dgl.DGLGraph | FactoredAdjacency,
        x: torch.Tensor,
        row_weight: torch.Tensor | None = None,
        pad_x: torch.Tensor | None = None,
        pad_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``pad_x`` [P, dim] / ``pad_weight`` [P]: padded rows for BatchNorm's statistics
        (module docstring; training mode, with ``row_weight``); they are not returned."""
        padded = pad_x is not None and pad_weight is not None and row_weight is not None and self.training
        for layer in self.layers:
            if padded:
                x, pad_x = layer.forward_padded(graph, x, row_weight, pad_x, pad_weight)
            else:
                x = layer(graph, x, row_weight)
        return x
