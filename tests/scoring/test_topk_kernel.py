"""The compiled top-k of one validation grid point (through ``fusion_choice._ranked_fused``)
against ``top_k`` of the dense fused rows; the candidate top-k is in test_candidates.py."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.dataset import _offsets
from basketgnn.scoring.sparse import SparseScores


@pytest.mark.parametrize("weight", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("width, n_items", [(None, 300), (3, 300), (None, 60)])
def test_grid_top_k_equals_the_dense_fusion(weight, width, n_items):
    """The fusion choice's ranking of one grid point (``fusion_choice._ranked_fused``) against
    ``top_k`` of the dense fused rows: logits that saturate the sigmoid (equal normalised
    values), quantised addends (equal fused values), and a prefix too short for some rows
    (``width`` 3: those rows take the dense path; 60 items: the prefix is the whole catalogue,
    so a walk that never sees a smaller value ends settled)."""
    from basketgnn.metrics import top_k
    from basketgnn.scoring.fusion import fuse_normalised, normalise
    from basketgnn.scoring.fusion_choice import _ranked_fused

    rng = np.random.default_rng(int(weight * 100) + (width or 0) + n_items)
    n, k = 40, 10
    model = np.round(rng.normal(size=(n, n_items)) * 4) * 10  # many ties, sigmoid 1.0 or 0.0
    model[:5] = rng.normal(size=(5, n_items))  # and rows with distinct values
    counts = rng.integers(0, 15, size=n)
    items = np.concatenate([np.sort(rng.choice(n_items, c, replace=False)) for c in counts]).astype(np.int64)
    addend = SparseScores(_offsets(counts), items, np.ceil(rng.uniform(0, 1, len(items)) * 4) / 4 * weight)
    normalised = normalise(model, "sigmoid")
    prefix = top_k(normalised, width or min(n_items, k + 2 * 15 + 64))
    want = top_k(fuse_normalised(model, None if weight == 1 else normalised, addend, weight), k)
    np.testing.assert_array_equal(_ranked_fused(model, normalised, prefix, addend, weight, k), want)
