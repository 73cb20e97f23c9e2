"""The one padding convention: sequences are left-aligned, and masks say True = real position."""

from __future__ import annotations

import torch


def length_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """True where position t < length.

    Example: lengths [2, 3], max_len 3 -> [[T, T, F], [T, T, T]].

    Shapes: lengths [n] -> [n, max_len] bool.
    """
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
