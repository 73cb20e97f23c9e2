"""Warm start from an earlier checkpoint, for every neural model: the same data reproduces the
old scores exactly; with a new and a dropped item (and the catalogue reordered) the shared items
keep their rows and scores, the new item keeps its fresh initialisation; wrong checkpoints are
clear errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances, make_split
from basketgnn.engine.batching import score_source
from basketgnn.engine.checkpoint import load_checkpoint, save_checkpoint
from basketgnn.engine.trainer import train_model
from basketgnn.engine.warm_start import (
    apply_warm_start,
    item_indexed_entries,
    read_previous,
    shared_item_rows,
)
from basketgnn.errors import UserError
from basketgnn.registry import get_spec

N_ITEMS = 12
TINY = {
    "dnntsp": dict(embed_dim=8, item_prior=True),
    "sasrec": dict(dim=8, heads=2, blocks=1, ffn_dim=8, dropout=0.0, max_len=6),
    "bert4rec": dict(dim=8, heads=2, blocks=1, ffn_dim=8, dropout=0.0, max_len=6),
    "din": dict(dim=8, attention_hidden=[8], hidden=[8], max_len=6),
}
# The dense truth of the default rule: which entries carry one row per item, after how many
# padding rows (the zoo's embeddings keep row 0 for padding).
ITEM_ROWS = {
    "dnntsp": {"embedding.weight": 0, "scorer.alpha": 0, "scorer.item_bias": 0},
    "sasrec": {"items.weight": 1},
    "bert4rec": {"items.weight": 1, "item_bias": 0},
    "din": {"items.weight": 1},
}
MODELS = list(TINY)


def _data(seed: int = 0, n_users: int = 40):
    """Customers with 3-6 baskets over items 0..N_ITEMS-2; item N_ITEMS-1 is never bought."""
    rng = np.random.default_rng(seed)
    seqs = [
        [sorted(rng.choice(N_ITEMS - 1, size=int(rng.integers(1, 4)), replace=False).tolist())
         for _ in range(int(rng.integers(3, 7)))]
        for _ in range(n_users)
    ]
    return from_sequences(seqs, n_items=N_ITEMS), seqs


def _config(name: str, **kw):
    return get_spec(name).config_cls(**{**TINY[name], "threads": 1, "batch_size": 16, **kw})


def _old_checkpoint(path, name: str, data, seed: int = 5):
    """A checkpoint of NAME whose every float weight and buffer is non-trivial (as trained)."""
    spec, config = get_spec(name), _config(name)
    torch.manual_seed(seed)
    module = spec.build(data.n_items, config)
    with torch.no_grad():
        for v in module.state_dict().values():
            if v.is_floating_point():
                v.add_(torch.randn_like(v) * 0.1)
                if v.ndim == 1 and (v < 0).any():  # keep BatchNorm variances positive
                    v.abs_()
    save_checkpoint(path, name, module, config, data.item_ids, {"epoch": 3})
    return module.eval()


def _scores(module, name, data, instances):
    spec, config = get_spec(name), _config(name)
    return score_source(module, spec.batches(data, instances, config, False), data.n_items, torch.device("cpu"))


@pytest.mark.parametrize("name", MODELS)
def test_default_rule_finds_the_item_rows(name):
    assert item_indexed_entries(get_spec(name), _config(name)) == ITEM_ROWS[name]


def test_shared_item_rows_by_hand():
    old, new = shared_item_rows(np.array(["a", "b", "c"]), np.array(["c", "d", "a"]))
    assert old.tolist() == [2, 0] and new.tolist() == [0, 2]


@pytest.mark.parametrize("name", MODELS)
def test_same_data_reproduces_the_old_scores_exactly(tmp_path, name):
    data, _ = _data()
    old = _old_checkpoint(tmp_path / "old.pt", name, data)
    spec, config = get_spec(name), _config(name)
    torch.manual_seed(123)  # another start: every weight must come from the checkpoint
    module = spec.build(data.n_items, config)
    report = apply_warm_start(module, spec, config, read_previous(tmp_path / "old.pt", spec), data.item_ids)
    assert (report.items_kept, report.items_new, report.items_dropped) == (N_ITEMS, 0, 0)
    assert report.previous_epoch == 3 and report.model == name
    inst = make_split(data, "temporal")["test"]
    assert np.array_equal(_scores(module.eval(), name, data, inst), _scores(old, name, data, inst))


def _reordered_with_new_item(data, seqs):
    """The same baskets over a reordered catalogue in which the never-bought item N-1 is gone
    and an item "fresh" is new. Returns (data, perm): old item i is new index perm[i]."""
    perm = np.random.default_rng(1).permutation(N_ITEMS)
    new = from_sequences([[[int(perm[i]) for i in b] for b in s] for s in seqs], n_items=N_ITEMS)
    ids = np.empty(N_ITEMS, dtype=object)
    ids[perm] = data.item_ids.astype(object)
    ids[perm[N_ITEMS - 1]] = "fresh"
    return dataclasses.replace(new, item_ids=ids.astype(str)), perm


@pytest.mark.parametrize("name", MODELS)
def test_new_and_dropped_items_keep_old_rows_and_fresh_init(tmp_path, name):
    data, seqs = _data()
    old = _old_checkpoint(tmp_path / "old.pt", name, data)
    new_data, perm = _reordered_with_new_item(data, seqs)
    spec, config = get_spec(name), _config(name)
    torch.manual_seed(7)
    fresh = spec.build(N_ITEMS, config).state_dict()
    torch.manual_seed(7)
    module = spec.build(N_ITEMS, config)
    report = apply_warm_start(module, spec, config, read_previous(tmp_path / "old.pt", spec), new_data.item_ids)
    assert (report.items_kept, report.items_new, report.items_dropped) == (N_ITEMS - 1, 1, 1)
    state, old_state = module.state_dict(), old.state_dict()
    new_item = int(perm[N_ITEMS - 1])
    for entry, pad in ITEM_ROWS[name].items():
        if entry not in state:
            continue
        # Old item i's row moved to its new index; the new item's row is the fresh one.
        kept = np.arange(N_ITEMS - 1)
        assert torch.equal(state[entry][pad + perm[kept]], old_state[entry][pad + kept])
        assert torch.equal(state[entry][pad + new_item], fresh[entry][pad + new_item])
        assert torch.equal(state[entry][:pad], old_state[entry][:pad])
    # A customer's scores over the shared items are unchanged before any step.
    inst = make_split(data, "temporal")["test"]
    before = _scores(old, name, data, inst)[:, : N_ITEMS - 1]
    after = _scores(module.eval(), name, new_data, inst)[:, perm[: N_ITEMS - 1]]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_a_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    data, _ = _data()
    _old_checkpoint(tmp_path / "sasrec.pt", "sasrec", data)
    with pytest.raises(UserError, match=r"sasrec\.pt: a sasrec checkpoint, but this run trains dnntsp"):
        read_previous(tmp_path / "sasrec.pt", get_spec("dnntsp"))


def test_other_architecture_options_are_a_clear_error(tmp_path):
    data, _ = _data()
    _old_checkpoint(tmp_path / "old.pt", "dnntsp", data)
    spec, config = get_spec("dnntsp"), _config("dnntsp", embed_dim=16)
    module = spec.build(N_ITEMS, config)
    with pytest.raises(UserError, match="other architecture options than this run .*embed_dim 8 there, 16 here"):
        apply_warm_start(module, spec, config, read_previous(tmp_path / "old.pt", spec), data.item_ids)


def test_not_a_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "x.pt").write_text("hello")
    with pytest.raises(UserError, match="not a basketgnn checkpoint"):
        read_previous(tmp_path / "x.pt", get_spec("dnntsp"))


def test_training_from_a_warm_start_validates_it_as_epoch_0_and_records_it(tmp_path):
    data, _ = _data(n_users=60)
    sp = make_split(data, "temporal")
    config = _config("dnntsp", epochs=2, lr=1e-2)
    spec = get_spec("dnntsp")
    train_model(spec, data, sp["train"], sp["validate"], config, tmp_path / "day1", progress=False)
    day1 = load_checkpoint(tmp_path / "day1" / "best.pt")
    _, result = train_model(spec, data, sp["train"], sp["validate"], config, tmp_path / "day2",
                               progress=False, warm_start=tmp_path / "day1" / "best.pt")
    assert result.warm_start is not None and result.warm_start.items_kept == N_ITEMS
    # Epoch 0 is the day-1 model on the same validation customers: its metrics, exactly.
    day2 = load_checkpoint(tmp_path / "day2" / "best.pt")
    assert day2.extras["warm_start"]["checkpoint"] == str((tmp_path / "day1" / "best.pt").resolve())
    assert result.best_validation["mean_ndcg"] >= day1.extras["validation"]["mean_ndcg"] - 1e-12
    if result.best_epoch == 0:
        assert result.best_validation == pytest.approx(day1.extras["validation"])
    # Warm-started training is a different run: a scratch resume.pt in its folder is not resumed.
    _, again = train_model(spec, data, sp["train"], sp["validate"], config, tmp_path / "day1",
                              progress=False, warm_start=tmp_path / "day2" / "best.pt")
    assert again.warm_start is not None and [r["epoch"] for r in again.history] == [1, 2]


def test_instances_of_new_customers_are_scored_after_a_warm_start(tmp_path):
    """Customers are a history, not a weight: a customer the old run never saw is scored."""
    data, _ = _data()
    _old_checkpoint(tmp_path / "old.pt", "din", data)
    more, _ = _data(seed=3, n_users=50)
    spec, config = get_spec("din"), _config("din")
    module = spec.build(N_ITEMS, config)
    apply_warm_start(module, spec, config, read_previous(tmp_path / "old.pt", spec), more.item_ids)
    scores = _scores(module.eval(), "din", more, Instances(np.arange(45, 50), more.n_baskets_per_user[45:50] - 1))
    assert scores.shape == (5, N_ITEMS) and np.isfinite(scores).all()
