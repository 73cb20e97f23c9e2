"""A multi-interest readout: K interest vectors from a sequence's states; an item's score is the
largest over them.

One pooled state scores every item with a single vector, so a customer who buys from several
unrelated groups of items gets one compromise direction. K learned interest queries q_k, each
shifted by the state of the step being read out, attend over the states that step may see:

    a_{t,k,s} = softmax_{s ∈ A(t)} ((q_k + F_t) · (W_K F_s + b_K) / sqrt(d))
    v_{t,k}   = Σ_s a_{t,k,s} (W_V F_s + b_V)                       interest k at step t [d]
    y_{t,i}   = max_k g(v_{t,k}) · E_i                              g: the model's output head

A(t) is the set of keys step t may read: s <= t for a causal model (so interest vectors stay
causal), every real step for a bidirectional one. Adding F_t to every query keeps the readout
tied to the step it predicts from; without it a bidirectional model would give every masked
step the same K vectors. K = 1 is an attention pooling of the states, not the plain last state.

Shapes: states [B, T, d], queries [B, Tq, d] (the states of the steps read out),
allowed [B, Tq, T] bool (True = key s may be read by query step) -> [B, Tq, K, d].
"""

from __future__ import annotations

import math

import torch
from torch import nn


class MultiInterestReadout(nn.Module):
    """Args:
    dim: state size d.
    interests: number K of interest vectors.
    """

    def __init__(self, dim: int, interests: int) -> None:
        super().__init__()
        if interests < 1:
            raise ValueError(f"interests must be >= 1, got {interests}")
        self.interests = interests
        self.queries = nn.Parameter(torch.randn(interests, dim) / math.sqrt(dim))  # [K, d]
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)

    def forward(self, states: torch.Tensor, queries: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        d = states.shape[-1]
        q = queries.unsqueeze(2) + self.queries  # [B, Tq, K, d]
        keys, values = self.key(states), self.value(states)  # [B, T, d] each
        logits = torch.einsum("bqkd,bsd->bqks", q, keys) / math.sqrt(d)  # [B, Tq, K, T]
        logits = logits.masked_fill(~allowed.unsqueeze(2), float("-inf"))
        weights = torch.softmax(logits, dim=-1)  # every query step reads at least itself
        return torch.einsum("bqks,bsd->bqkd", weights, values)  # [B, Tq, K, d]


def max_over_interests(vectors: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Every item's score under its best interest: max_k vectors[..., k, :] · items[i].

    Shapes: vectors [..., K, d], items [I, d] -> [..., I].
    """
    return (vectors @ items.T).amax(dim=-2)


def max_over_interests_of(vectors: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """The score of chosen items under their best interest, each row its own items.

    Shapes: vectors [B, T, K, d], items [B, T, P, d] -> [B, T, P].
    """
    return torch.einsum("btkd,btpd->btkp", vectors, items).amax(dim=2)
