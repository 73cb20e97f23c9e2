"""Masked multi-head self-attention over each node's timestamps (MODEL.md §2).

For each node separately, with C its [T, d] sequence:

    Q = C W_q, K = C W_k, V = C W_v              (no bias)
    A_h = softmax(Q_h K_h^T / sqrt(d_head) + mask),   mask: t attends to t' <= t only
    Z = concat_h(A_h V_h)   or   mean_h(A_h V_h)

No residual, no layer norm. With ``merge="concat"`` d_head = d / heads; with ``"mean"`` each
head has d_head = d and the heads are averaged. Because of the causal mask a real position
never looks at padding (padding is only ever after the real positions), so real outputs do
not change when padding is added.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


class MaskedTemporalSelfAttention(nn.Module):
    """Causal multi-head self-attention per node.

    Args:
        dim: input and output size d.
        heads: number of heads.
        merge: "concat" (d_head = d / heads) or "mean" (d_head = d, heads averaged).
        dropout: dropout on the attention weights (0 = none, as published).

    Shapes: x [nodes, T, d] -> [nodes, T, d].
    """

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
        self.qkv = nn.Linear(dim, 3 * heads * self.d_head, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, T, _ = x.shape
        q, k, v = (
            self.qkv(x).view(n, T, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4)
        )  # each [nodes, heads, T, d_head]
        z = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )  # [nodes, heads, T, d_head]; scale 1/sqrt(d_head) by default
        if self.merge == "mean":
            return z.mean(dim=1)  # [nodes, T, d]
        return z.transpose(1, 2).reshape(n, T, self.heads * self.d_head)  # [nodes, T, d]
