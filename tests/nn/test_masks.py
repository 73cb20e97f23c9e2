"""The padding convention (``nn/masks.py``): True = a real position, sequences left-aligned."""

from __future__ import annotations

import torch

from basketgnn.nn.masks import length_mask


def test_length_mask_against_a_loop():
    lengths = torch.tensor([0, 2, 3, 1])
    mask = length_mask(lengths, 3)
    expected = [[t < int(n) for t in range(3)] for n in lengths]
    assert mask.dtype == torch.bool and mask.tolist() == expected


def test_length_mask_wider_than_every_length():
    assert length_mask(torch.tensor([2]), 5).tolist() == [[True, True, False, False, False]]
    assert length_mask(torch.zeros(0, dtype=torch.long), 4).shape == (0, 4)
