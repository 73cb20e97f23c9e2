"""DNNTSP's catalogue_columns: each item's vector is its embedding plus one learned vector per
catalogue column value. Checked against the obvious reference (a model without the option whose
embedding holds those sums, float64): the same scores, and the gradient of a value's vector is
the sum of the gradients of the items that have it. The item_prior start is checked through the
spec's init: per-item bias = log-odds of the item in the training targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.catalogue import ItemCatalogue
from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.errors import UserError
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig
from tests.models.test_dnntsp_faithful import BATCHES, DIM, N_ITEMS, make_batch, make_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COLUMNS = ["dept", "brand"]


def _codes(buckets: int) -> torch.Tensor:
    """[N_ITEMS, 2] codes: 0 (unknown) for some items, codes past the bucket count for others."""
    gen = torch.Generator().manual_seed(5)
    dept = torch.randint(0, 4, (N_ITEMS,), generator=gen)
    brand = torch.randint(0, buckets + 3, (N_ITEMS,), generator=gen)
    return torch.stack([dept, brand], dim=1)


def _pair(buckets: int, **switches) -> tuple[DNNTSP, DNNTSP, torch.Tensor]:
    """(model with catalogue columns and random value vectors, the same model without the option,
    the reference item table [I, d] = E_i + sum_c F_c[code_ic mod buckets] by loops)."""
    model = make_model(catalogue_columns=COLUMNS, catalogue_buckets=buckets, **switches)
    codes = _codes(buckets)
    model.init_catalogue(codes)
    with torch.no_grad():
        model.catalogue.weight.normal_()
    plain = make_model(**switches)
    state = {k: v for k, v in model.state_dict().items() if k not in ("catalogue.weight", "item_codes")}
    table = model.embedding.weight.detach().clone()
    for i in range(N_ITEMS):
        for c in range(len(COLUMNS)):
            table[i] += model.catalogue.weight[c * buckets + int(codes[i, c]) % buckets].detach()
    plain.load_state_dict({**state, "embedding.weight": table})
    return model, plain, table


@pytest.mark.parametrize("switch", [{}, {"gcn": False}, {"repeat_features": True}])
@pytest.mark.parametrize("buckets", [64, 3])  # 3: codes share rows (code modulo buckets)
def test_scores_and_gradients_equal_the_summed_embedding(switch, buckets):
    model, plain, table = _pair(buckets, **switch)
    torch.testing.assert_close(model.item_vectors(), table, rtol=0, atol=1e-12)
    for mode in ("train", "eval"):
        model.train(mode == "train")
        plain.train(mode == "train")
        batch = make_batch(BATCHES["edge_cases"])
        weights = torch.randn(len(BATCHES["edge_cases"]), N_ITEMS, dtype=torch.float64)
        scores, ref = model(batch), plain(batch)
        torch.testing.assert_close(scores, ref, rtol=0, atol=1e-10)
        (grad_cat, grad_emb) = torch.autograd.grad((scores * weights).sum(), [model.catalogue.weight, model.embedding.weight])
        (grad_ref,) = torch.autograd.grad((ref * weights).sum(), [plain.embedding.weight])
        torch.testing.assert_close(grad_emb, grad_ref, rtol=0, atol=1e-10)
        expected = torch.zeros_like(grad_cat)
        codes = model.item_codes
        for i in range(N_ITEMS):
            for c in range(len(COLUMNS)):
                expected[c * buckets + int(codes[i, c]) % buckets] += grad_ref[i]
        torch.testing.assert_close(grad_cat, expected, rtol=0, atol=1e-10)


def test_the_option_starts_as_the_model_without_it():
    torch.manual_seed(0)
    with_columns = DNNTSP(N_ITEMS, DIM, catalogue_columns=COLUMNS).double()
    with_columns.init_catalogue(_codes(16))
    assert float(with_columns.catalogue.weight.abs().sum()) == 0.0
    torch.testing.assert_close(with_columns.item_vectors(), with_columns.embedding.weight, rtol=0, atol=0)
    # Without columns the state dict is the one of a model built before the option existed.
    assert not {k for k in DNNTSP(N_ITEMS, DIM).state_dict() if "catalogue" in k or "codes" in k}


def _data_with_catalogue():
    users = [[[0, 1], [2], [1, 3]], [[4], [1, 4]], [[5, 6], [0], [6]], [[2, 3], [3]]]
    data = from_sequences(users, n_items=8)
    codes = np.asarray([[1, 2], [1, 0], [2, 1], [0, 1], [3, 2], [1, 1], [2, 2], [3, 0]], dtype=np.int32)
    catalogue = ItemCatalogue(("brand", "dept"), codes, (np.asarray(["x", "y"]), np.asarray(["a", "b", "c"])))
    from dataclasses import replace

    return replace(data, catalogue=catalogue)


def test_init_reads_the_named_columns_in_order_and_names_unknown_ones():
    data = _data_with_catalogue()
    train = Instances(np.arange(4), np.asarray([2, 1, 2, 1]))
    config = DNNTSPConfig(embed_dim=4, catalogue_columns=["dept", "brand"])
    module = SPEC.build(data.n_items, config)
    SPEC.init(module, data, train, config)
    assert np.array_equal(module.item_codes.numpy(), data.catalogue.codes[:, [1, 0]])
    bad = DNNTSPConfig(embed_dim=4, catalogue_columns=["colour"])
    with pytest.raises(UserError, match="no column 'colour'; its columns are 'brand', 'dept'"):
        SPEC.init(SPEC.build(data.n_items, bad), data, train, bad)


def test_item_prior_start_is_the_log_odds_of_each_item_in_the_training_targets():
    data = _data_with_catalogue()
    train = Instances(np.arange(4), np.asarray([2, 1, 2, 1]))  # targets {1, 3}, {1, 4}, {6}, {3}
    config = DNNTSPConfig(embed_dim=4, item_prior=True)
    module = SPEC.build(data.n_items, config).double()
    SPEC.init(module, data, train, config)
    share = torch.tensor([0, 2, 0, 2, 1, 0, 1, 0], dtype=torch.float64) / 4
    p = share.clamp(1e-4, 1 - 1e-4)
    torch.testing.assert_close(module.scorer.item_bias, torch.log(p / (1 - p)))
    # With w_o = 0 (no signal from the vectors yet) every initial logit is the item's log-odds,
    # for a customer's own items as for the rest.
    with torch.no_grad():
        module.scorer.out.weight.zero_()
    module.eval()
    batch = make_batch([[[0, 1], [2]], [[4]]])
    scores = module(batch)
    torch.testing.assert_close(torch.sigmoid(scores), p.expand(2, -1))
