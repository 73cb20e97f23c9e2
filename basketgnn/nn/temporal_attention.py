"""Masked multi-head self-attention over each node's timestamps (DNNTSP's temporal step).

For each node separately, with C its [T, d] sequence:

    Q = C W_q, K = C W_k, V = C W_v              (no bias)
    A_h = softmax(Q_h K_h^T / sqrt(d_head) + mask),   mask: t attends to t' <= t only
    Z = concat_h(A_h V_h)   or   mean_h(A_h V_h)

No residual, no layer norm. With ``merge="concat"`` d_head = d / heads; with ``"mean"`` each
head has d_head = d and the heads are averaged. Because of the causal mask a real position
never looks at padding (padding is only ever after the real positions), so real outputs do
not change when padding is added.

Two ways to compute the same thing:

- :meth:`forward` on dense padded sequences [nodes, T, d] (simple; used by tests and tools);
- :meth:`forward_rows` on the distinct rows of :mod:`basketgnn.graph.cooccurrence`: a node's
  absent timestamps share one row, so its keys collapse to P + 1 distinct rows with a log-count
  bias (see ``AttentionBucket``). Exact, and far less work where most nodes are bought once
  (two distinct keys whatever T). With dropout > 0 the dropout acts on the collapsed weights.

:meth:`forward_aggregated` follows the attention with the temporal readout; :meth:`forward_nodes`
does the same from a batch's node plan, on the CPU through compiled kernels
(:mod:`basketgnn.nn.attention_kernel` where no gradient or dropout is needed: scoring,
validation; :mod:`basketgnn.nn.attention_train_kernel`, forward and backward, in training),
elsewhere through :meth:`forward_aggregated`.
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from basketgnn.jit import compiled_inference_applies, compiled_training_applies
from basketgnn.nn import attention_kernel, attention_train_kernel


class AttentionBucket(Protocol):
    """The tensors :meth:`MaskedTemporalSelfAttention.forward_rows` reads for a group of nodes
    with the same number D of distinct rows (built by ``graph.cooccurrence``; this layer knows
    no data code, only these tensors).

    Shapes (M_b nodes, D distinct rows, T = batch T_max): nodes [M_b] node ids; rows [M_b, D]
    row ids (column 0: the absent row); query [M_b, T] column of the query at t;
    log_count [M_b, T, D] log of how often each key occurs up to t (-inf: not yet).
    """

    @property
    def nodes(self) -> torch.Tensor: ...

    @property
    def rows(self) -> torch.Tensor: ...

    @property
    def query(self) -> torch.Tensor: ...

    @property
    def log_count(self) -> torch.Tensor: ...


class NodePlan(Protocol):
    """A batch's nodes as :meth:`MaskedTemporalSelfAttention.forward_nodes` reads them (a
    ``graph.cooccurrence.GraphBatch``).

    Shapes (M nodes, P_b present rows): absent_row, node_count, node_len [M]; node_rows,
    node_times [P_b] (each node's present rows and times, node by node, in time order);
    max_len: T, the batch's longest history; attention: the same plan as buckets (for the
    tensor path).
    """

    @property
    def absent_row(self) -> torch.Tensor: ...

    @property
    def node_count(self) -> torch.Tensor: ...

    @property
    def node_len(self) -> torch.Tensor: ...

    @property
    def node_rows(self) -> torch.Tensor: ...

    @property
    def node_times(self) -> torch.Tensor: ...

    @property
    def max_len(self) -> int: ...

    @property
    def attention(self) -> tuple[AttentionBucket, ...]: ...


class MaskedTemporalSelfAttention(nn.Module):
    """Causal multi-head self-attention per node.

    Args:
        dim: input and output size d.
        heads: number of heads.
        merge: "concat" (d_head = d / heads) or "mean" (d_head = d, heads averaged).
        dropout: dropout on the attention weights (0 = none, as published).

    Shapes: forward: x [nodes, T, d] -> [nodes, T, d];
    forward_rows: rows [R, d], buckets covering M nodes, T -> [M, T, d].
    """

    #: False: :meth:`forward_nodes` always takes the tensor path (tests, benchmarks).
    compiled: bool = True

    def __init__(
        self,
        dim: int,
        heads: int = 4,
        merge: Literal["concat", "mean"] = "concat",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if merge == "concat" and dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads, self.merge, self.dropout = heads, merge, dropout
        self.d_head = dim // heads if merge == "concat" else dim
        self.out_dim = dim
        self.qkv = nn.Linear(dim, 3 * heads * self.d_head, bias=False)

    def _merge_heads(self, z: torch.Tensor) -> torch.Tensor:
        """[n, heads, T, d_head] -> [n, T, d]."""
        if self.merge == "mean":
            return z.mean(dim=1)
        n, _, T, _ = z.shape
        return z.transpose(1, 2).reshape(n, T, self.heads * self.d_head)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[n, L, d] -> q, k, v each [n, heads, L, d_head]."""
        n, L, _ = x.shape
        q, k, v = self.qkv(x).view(n, L, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)  # each [nodes, heads, T, d_head]
        z = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )  # [nodes, heads, T, d_head]; scale 1/sqrt(d_head) by default
        return self._merge_heads(z)  # [nodes, T, d]

    def _keys_first_weights(
        self, q: torch.Tensor, k: torch.Tensor, b: AttentionBucket, scale: float
    ) -> torch.Tensor:
        """Attention weights of one bucket over its D distinct keys, keys-first.

        Shapes: q, k [M_b, heads, D, d_head] -> a [M_b, heads, D (key), T (query)].
        """
        T = b.query.shape[1]
        # Scores are laid out keys-first, [.., D (key), T (query)], so the softmax runs over
        # a non-last dim: with D mostly 2-5, faster (fwd + bwd) on CPU than a softmax over a
        # tiny last dim. Same values either way (dropout's random mask is
        # drawn on this layout, so training runs differ bit-wise from the query-first one).
        s = (k @ q.transpose(-1, -2)) * scale  # [M_b, heads, D (key), D (query)]
        M_b, H, D, _ = s.shape
        s = s.gather(3, b.query[:, None, None, :].expand(M_b, H, D, T))  # [M_b, heads, D, T]
        bias = b.log_count.to(s.dtype).transpose(1, 2).unsqueeze(1)  # [M_b, 1, D, T]
        a = torch.softmax(s + bias, dim=2)  # [M_b, heads, D, T], over keys
        if self.training and self.dropout > 0:
            a = F.dropout(a, self.dropout)
        return a

    def _two_keys_weights(
        self, q: torch.Tensor, k: torch.Tensor, b: AttentionBucket, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The bucket of nodes bought once (D = 2 keys: absent row 0, present row 1), in closed
        form: a softmax over two keys is w_1 = sigmoid(logit_1 - logit_0), w_0 = sigmoid(logit_0 -
        logit_1), so no [T, D] score matrix or batched matmul is needed. Equal to the general path
        up to rounding (a log-count of -inf gives w = 0 or 1 exactly); dropout draws its mask on
        the same [M_b, heads, 2, T] layout.

        Shapes: q, k [M_b, heads, 2, d_head] -> w0, w1 [M_b, heads, T].
        """
        M_b, H, _, _ = q.shape
        T = b.query.shape[1]
        # (k_1 - k_0) . q_c for both possible query rows c: [M_b, heads, 2]
        delta = ((k[:, :, 1] - k[:, :, 0]).unsqueeze(2) * q).sum(-1) * scale
        delta = delta.gather(2, b.query[:, None, :].expand(M_b, H, T))  # [M_b, heads, T]
        lc = b.log_count.to(q.dtype)  # [M_b, T, 2]
        logit = delta + (lc[:, :, 1] - lc[:, :, 0]).unsqueeze(1)  # [M_b, heads, T]
        w1, w0 = torch.sigmoid(logit), torch.sigmoid(-logit)  # not 1 - w1: exact near w1 = 1
        if self.training and self.dropout > 0:
            w = F.dropout(torch.stack([w0, w1], dim=2), self.dropout)  # [M_b, heads, 2, T]
            w0, w1 = w[:, :, 0], w[:, :, 1]
        return w0, w1

    def _keys_first(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: AttentionBucket, scale: float
    ) -> torch.Tensor:
        """Attention output of one bucket. Shapes: q, k, v [M_b, heads, D, d_head] ->
        [M_b, heads, T, d_head]."""
        return self._keys_first_weights(q, k, b, scale).transpose(-1, -2) @ v

    def _two_keys(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: AttentionBucket, scale: float
    ) -> torch.Tensor:
        """:meth:`_keys_first` for D = 2 in closed form. Shapes: q, k, v [M_b, heads, 2,
        d_head] -> [M_b, heads, T, d_head]."""
        w0, w1 = self._two_keys_weights(q, k, b, scale)
        return w0.unsqueeze(-1) * v[:, :, :1] + w1.unsqueeze(-1) * v[:, :, 1:]

    def _bucket_weights(
        self, q: torch.Tensor, k: torch.Tensor, b: AttentionBucket, scale: float
    ) -> torch.Tensor:
        """Weights of every key at every time. Shapes: -> [M_b, heads, D, T]."""
        if q.shape[2] == 2:
            return torch.stack(self._two_keys_weights(q, k, b, scale), dim=2)
        return self._keys_first_weights(q, k, b, scale)

    def forward_aggregated(
        self,
        rows: torch.Tensor,
        buckets: tuple[AttentionBucket, ...],
        num_nodes: int,
        lengths: torch.Tensor,
        w_agg: torch.Tensor | None,
    ) -> torch.Tensor:
        """Attention followed by the temporal readout, without the [M, T, d] sequences.

        Equal to ``aggregate_nodes_temporal_feature(forward_rows(...), lengths, w_agg)`` (or,
        with ``w_agg=None``, to the output at each node's last real timestamp). Per head h the
        output at t is Z_{h,t} = sum_y A_{h,y,t} V_{h,y} over the node's D distinct keys y, so

            a_t = Z_t . w_agg = sum_h sum_y A_{h,y,t} (V_{h,y} . w_agg_h)      (t < length)
            z   = sum_t a_t Z_t = merge_h sum_y (sum_t a_t A_{h,y,t}) V_{h,y}

        which needs only the [M_b, heads, D, T] weights the attention computes anyway: on
        long histories with many distinct items, [M, T, d] and its gradient were the largest
        tensors of a training step. (concat: w_agg_h is head h's slice of w_agg; mean: the
        heads' results are averaged, so a_t uses w_agg / heads on every head.)

        Shapes: rows [R, d]; lengths [M]; w_agg [d] or None -> [M, d].
        """
        if not buckets:
            return rows.new_zeros(num_nodes, self.out_dim)
        scale = self.d_head**-0.5
        outs = []
        for b in buckets:
            x = rows.index_select(0, b.rows.reshape(-1)).view(*b.rows.shape, rows.shape[1])
            q, k, v = self._split(x)  # each [M_b, heads, D, d_head]
            a = self._bucket_weights(q, k, b, scale)  # [M_b, heads, D, T]
            T = a.shape[-1]
            length = lengths.index_select(0, b.nodes)  # [M_b]
            if w_agg is None:
                at = F.one_hot(length - 1, T).to(a.dtype)  # [M_b, T]
            else:
                if self.merge == "concat":
                    vw = torch.einsum("mhdk,hk->mhd", v, w_agg.view(self.heads, self.d_head))
                else:
                    vw = (v @ w_agg) / self.heads  # [M_b, heads, D]
                real = torch.arange(T, device=a.device)[None, :] < length[:, None]  # [M_b, T]
                at = torch.einsum("mhdt,mhd->mt", a, vw) * real.to(a.dtype)  # [M_b, T]
            c = torch.einsum("mhdt,mt->mhd", a, at)  # [M_b, heads, D]
            z = torch.einsum("mhd,mhdk->mhk", c, v)  # [M_b, heads, d_head]
            outs.append(z.mean(1) if self.merge == "mean" else z.flatten(1))  # [M_b, d]
        order = torch.cat([b.nodes for b in buckets])  # [M] node of each concatenated row
        position = torch.empty_like(order)
        position[order] = torch.arange(len(order), device=order.device)
        return torch.cat(outs).index_select(0, position)  # [M, d]

    def forward_nodes(self, rows: torch.Tensor, plan: NodePlan, w_agg: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward_aggregated` of the plan's nodes. On the CPU (unless ``compiled`` is
        False) through compiled kernels, equal up to float rounding: ``nn.attention_kernel``
        when no gradient or dropout is needed, else ``nn.attention_train_kernel`` (forward and
        backward; dropout's mask drawn as the tensor path draws it).

        Shapes: rows [R, d]; w_agg [d] or None -> [M, d].
        """
        if self.compiled and compiled_inference_applies(
            rows, self.qkv.weight, w_agg, training=self.training, dropout=self.dropout
        ):
            return attention_kernel.aggregated(
                self.qkv(rows), plan.absent_row, plan.node_count, plan.node_rows, plan.node_times,
                plan.node_len, w_agg, self.heads, self.d_head, self.merge == "mean",
            )  # fmt: skip
        if self.compiled and compiled_training_applies(rows):
            return attention_train_kernel.aggregated(
                self.qkv(rows), plan.absent_row, plan.node_count, plan.node_rows, plan.node_times,
                plan.node_len, plan.max_len, w_agg, self.heads, self.d_head, self.merge == "mean",
                self.dropout if self.training else 0.0,
            )  # fmt: skip
        return self.forward_aggregated(rows, plan.attention, len(plan.absent_row), plan.node_len, w_agg)

    def forward_nodes_dot(
        self, rows: torch.Tensor, plan: NodePlan, w_agg: torch.Tensor | None, w_out: torch.Tensor
    ) -> torch.Tensor:
        """``forward_nodes(rows, plan, w_agg) @ w_out``: each node's output on one direction
        (the linear scorer's weight), without the node's d outputs on the compiled path.

        The readout weights and the output are linear in the values, so per head they need
        only two numbers of each value: v_h . w_agg_h (the readout) and v_h . w_out_h (this
        product), with w_h head h's slice for concat heads and the whole vector for averaged
        ones. Both are x W_v,h^T w_h, so the q/k/v product computes them directly through
        W_v,h^T w_h (two columns per head in place of d_head) and the kernel runs on values two
        wide (one with the "last" readout). Equal to the product after the attention up to float
        rounding; elsewhere (gradients, dropout, another device) it is that product.

        Shapes: rows [R, d]; w_agg [d] or None; w_out [d] -> [M].
        """
        mean = self.merge == "mean"
        if not (
            self.compiled
            and compiled_inference_applies(
                rows, self.qkv.weight, w_agg, w_out, training=self.training, dropout=self.dropout
            )
        ):
            return self.forward_nodes(rows, plan, w_agg) @ w_out
        H, dh = self.heads, self.d_head
        W = self.qkv.weight  # [3 H d_head, d]: q, k, v blocks
        W_v = W[2 * H * dh :].view(H, dh, -1)  # [H, d_head, d]

        def per_head(w: torch.Tensor) -> torch.Tensor:  # [d] -> [H, d_head]
            return w.expand(H, dh) if mean else w.view(H, dh)

        directions = ([] if w_agg is None else [per_head(w_agg)]) + [per_head(w_out)]
        d_v = len(directions)
        folded = torch.stack([torch.einsum("hk,hkd->hd", w, W_v) for w in directions], dim=1)  # [H, d_v, d]
        weight = torch.cat([W[: 2 * H * dh], folded.reshape(H * d_v, -1)])  # [2 H d_head + H d_v, d]
        # The readout reads the first folded column of each head: a selector in w_agg's place.
        select = None if w_agg is None else rows.new_tensor([1.0, 0.0]).repeat(1 if mean else H)
        out = attention_kernel.aggregated(
            F.linear(rows, weight), plan.absent_row, plan.node_count, plan.node_rows, plan.node_times,
            plan.node_len, select, H, dh, mean, d_v,
        )  # fmt: skip  # [M, d_v] (mean) or [M, H d_v]
        return out[:, -1] if mean else out.view(-1, H, d_v)[:, :, -1].sum(1)

    def forward_rows(
        self, rows: torch.Tensor, buckets: tuple[AttentionBucket, ...], num_nodes: int, T: int
    ) -> torch.Tensor:
        if not buckets:
            return rows.new_zeros(num_nodes, T, self.out_dim)
        scale = self.d_head**-0.5
        outs = []
        for b in buckets:
            # index_select, not rows[b.rows]: same values, but its backward is index_add
            # rather than an accumulating index_put, which is slower on CPU.
            x = rows.index_select(0, b.rows.reshape(-1)).view(*b.rows.shape, rows.shape[1])
            q, k, v = self._split(x)  # each [M_b, heads, D, d_head]
            attend = self._two_keys if x.shape[1] == 2 else self._keys_first
            outs.append(self._merge_heads(attend(q, k, v, b, scale)))  # [M_b, T, d]
        # Buckets partition the nodes: one gather puts every node back in place.
        order = torch.cat([b.nodes for b in buckets])  # [M] node of each concatenated row
        position = torch.empty_like(order)
        position[order] = torch.arange(len(order), device=order.device)
        return torch.cat(outs).index_select(0, position)  # [M, T, d]
