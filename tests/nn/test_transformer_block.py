"""The Transformer block of SASRec / BERT4Rec against the step-by-step reference."""

from __future__ import annotations

import pytest
import torch

from basketgnn.nn.masks import length_mask
from basketgnn.nn.transformer_block import TransformerBlock, attention_mask
from tests.support.reference_zoo import transformer_block


def test_attention_mask_hand_case():
    mask = torch.tensor([[True, True, False]])
    causal = attention_mask(mask, causal=True)[0, 0]
    both = attention_mask(mask, causal=False)[0, 0]
    assert causal.tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert both.tolist() == [[True, True, False]] * 3


@pytest.mark.parametrize(
    "causal, norm_first, act", [(True, True, "relu"), (False, False, "gelu"), (True, False, "gelu")]
)
def test_block_matches_reference_outputs_and_gradients(causal, norm_first, act):
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, 12, 0.0, causal=causal, norm_first=norm_first, activation=act).double().eval()
    lengths = torch.tensor([3, 1, 4])
    x = torch.randn(3, 4, 8, dtype=torch.float64, requires_grad=True)
    mask = length_mask(lengths, 4)
    out = block(x, mask)
    (out * mask.unsqueeze(-1)).sum().backward()
    fast_grad = [p.grad.clone() for p in block.parameters()]
    fast_x = x.grad.clone()
    block.zero_grad()
    x.grad = None
    total = 0
    for u, n in enumerate(lengths.tolist()):
        ref = transformer_block(block, x[u, :n])
        torch.testing.assert_close(out[u, :n], ref, rtol=1e-10, atol=1e-10)
        total = total + ref.sum()
    total.backward()
    for fast, p in zip(fast_grad, block.parameters()):
        torch.testing.assert_close(fast, p.grad, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(fast_x, x.grad, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_real_outputs_unchanged_by_more_padding(causal):
    torch.manual_seed(1)
    block = TransformerBlock(8, 4, 16, 0.0, causal=causal, norm_first=causal).double().eval()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    lengths = torch.tensor([3, 2])
    padded = torch.cat([x, torch.randn(2, 5, 8, dtype=torch.float64)], dim=1)
    short = block(x, length_mask(lengths, 3))
    long = block(padded, length_mask(lengths, 8))
    for u, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(short[u, :n], long[u, :n], rtol=1e-12, atol=1e-12)


def test_heads_must_divide_dim():
    with pytest.raises(ValueError, match="not divisible"):
        TransformerBlock(10, 3, 8, 0.0, causal=True, norm_first=True)
