"""Multi-head self-attention and the Transformer block of SASRec and BERT4Rec.

Self-attention over a sequence X [T, d] (per user), h heads of size d_h = d / h:

    Q = X W_Q + b_Q,  K = X W_K + b_K,  V = X W_V + b_V
    A_j = softmax(Q_j K_j^T / sqrt(d_h) + M),   MH(X) = concat_j(A_j V_j) W_O + b_O

M is -inf where a key is padding, and (causal) where key t' > query t. Point-wise feed-forward
FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to every step separately.

Two arrangements of residual, LayerNorm and dropout:

- ``norm_first=True`` (SASRec, Kang & McAuley 2018, section III-C: g(x) = x + Dropout(g(LayerNorm(x)))):
      Y = X + Dropout(MH(LN(X)));   Z = Y + Dropout(FFN(LN(Y)))
  (the model applies one more LayerNorm after its last block);
- ``norm_first=False`` (BERT4Rec, Sun et al. 2019, section 3.3, the original Transformer):
      Y = LN(X + Dropout(MH(X)));   Z = LN(Y + Dropout(FFN(Y)))

Dropout also acts on the attention weights. Real positions never attend to padding, so with
left-aligned sequences their outputs do not change when padding is added.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


def attention_mask(mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Which keys each query may read (True = allowed).

    Shapes: mask [B, T] bool (True = real step) -> [B, 1, T, T] (broadcast over heads).
    """
    allowed = mask[:, None, None, :]  # [B, 1, 1, T]: keys that are real
    if causal:
        T = mask.shape[1]
        allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=mask.device).tril()
    return allowed.expand(-1, 1, mask.shape[1], -1)


class MultiHeadSelfAttention(nn.Module):
    """Args:
    dim: model size d.
    heads: number of heads h (d must be divisible by h).
    dropout: dropout on the attention weights.

    Shapes: x [B, T, d], allowed [B, 1, T, T] bool (see :func:`attention_mask`) -> [B, T, d].
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads, self.d_head, self.dropout = heads, dim // heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4)  # 3 x [B, h, T, d_h]
        z = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0
        )  # [B, h, T, d_h]
        return self.out(z.transpose(1, 2).reshape(B, T, d))  # [B, T, d]


class TransformerBlock(nn.Module):
    """One self-attention + feed-forward block (see the module docstring for the formulas).

    Args:
        dim: model size d.
        heads: attention heads.
        ffn_dim: hidden size of the point-wise feed-forward network.
        dropout: dropout on attention weights and on both sub-layer outputs.
        causal: query t reads keys t' <= t only (SASRec) or every real key (BERT4Rec).
        norm_first: pre-LayerNorm (SASRec) or post-LayerNorm (BERT4Rec).
        activation: "relu" (SASRec) or "gelu" (BERT4Rec) inside the feed-forward network.

    Shapes: x [B, T, d], mask [B, T] bool (True = real step) -> [B, T, d].
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        ffn_dim: int,
        dropout: float,
        causal: bool,
        norm_first: bool,
        activation: Literal["relu", "gelu"] = "relu",
    ) -> None:
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be relu or gelu, got {activation!r}")
        self.causal, self.norm_first = causal, norm_first
        self.attention = MultiHeadSelfAttention(dim, heads, dropout)
        self.ffn = nn.Sequential(
            nn.Linear(dim, ffn_dim), nn.ReLU() if activation == "relu" else nn.GELU(), nn.Linear(ffn_dim, dim)
        )
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        allowed = attention_mask(mask, self.causal)  # [B, 1, T, T]
        if self.norm_first:
            y = x + self.drop1(self.attention(self.norm1(x), allowed))
            return y + self.drop2(self.ffn(self.norm2(y)))
        y = self.norm1(x + self.drop1(self.attention(x, allowed)))
        return self.norm2(y + self.drop2(self.ffn(y)))
