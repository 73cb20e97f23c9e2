"""Mean basket pooling: hand case, padding slots and empty (padding) steps."""

from __future__ import annotations

import torch

from basketgnn.nn.basket_pooling import MeanBasketPooling


def test_mean_of_real_items_only():
    vectors = torch.tensor([[[1.0, 2.0], [3.0, 6.0], [100.0, 100.0]], [[5.0, 5.0], [7.0, 7.0], [9.0, 9.0]]])
    slots = torch.tensor([[True, True, False], [False, False, False]])
    out = MeanBasketPooling()(vectors, slots)
    assert out.tolist() == [[2.0, 4.0], [0.0, 0.0]]  # padding slot ignored; empty step is 0
