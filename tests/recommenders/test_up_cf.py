"""UP-CF@r: a hand-computed case, a loop-by-loop reference, no leak of a customer's own target,
tuning on validation only, and the command line on a small log."""

from __future__ import annotations

import json
from itertools import product

import numpy as np
import pytest

from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import Instances, make_split
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.recommenders import up_cf
from basketgnn.recommenders.up_cf import UpCf
from basketgnn.registry import make_baseline
from tests.support.cli import run
from tests.support.scoring import random_data

# --- the loop reference ------------------------------------------------------------------------


def reference_popularity(baskets: list[np.ndarray], n_items: int, r: int | None) -> np.ndarray:
    recent = baskets if r is None else baskets[-r:]
    p = np.zeros(n_items)
    for basket in recent:
        for i in set(basket.tolist()):
            p[i] += 1
    return p / max(len(recent), 1)


def reference_scores(
    data: BasketData, train: Instances, query: Instances, r: int | None, alpha: float, q: float
) -> np.ndarray:
    """s(u, i) = p_r(u, i) + Σ_{v ≠ u} sim_α(u, v)^q p_r(v, i), user by user, neighbour by
    neighbour; a training row is baskets 0..h of its customer."""
    pool = [(int(v), data.user_baskets(v)[: h + 1]) for v, h in zip(train.users, train.n_history)]
    out = []
    for u, h in zip(query.users, query.n_history):
        mine = data.user_baskets(u)[:h]
        items_u = {int(i) for b in mine for i in b}
        s = reference_popularity(mine, data.n_items, r)
        for v, theirs in pool:
            if v == u:
                continue
            items_v = {int(i) for b in theirs for i in b}
            sim = len(items_u & items_v) / (len(items_u) ** alpha * len(items_v) ** (1 - alpha))
            s = s + sim**q * reference_popularity(theirs, data.n_items, r)
        out.append(s)
    return np.array(out)


@pytest.mark.parametrize(
    "seed, r, alpha, q",
    [(0, 1, 0.5, 1.0), (1, 3, 0.25, 5.0), (2, None, 1.0, 10.0), (3, 2, 0.0, 2.5), (4, 100, 0.75, 50.0)],
)
def test_scores_match_the_loop_reference(seed, r, alpha, q):
    data = random_data(seed)
    n = data.n_baskets_per_user
    train = Instances(np.arange(30), n[:30] - 1)
    # Test users 30..39, plus users 0..4 with a shorter history: they are in the pool too and
    # must not be their own neighbours.
    query = Instances(np.r_[np.arange(30, 40), np.arange(5)], np.r_[n[30:40] - 1, n[:5] - 2])
    expected = reference_scores(data, train, query, r, alpha, q)
    model = UpCf(r=r, alpha=alpha, q=q, tune=False).fit(data, train)
    scores = model.score(data, query)
    assert scores.dtype == np.float32 and scores.shape == (15, data.n_items)
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-12)


def test_chunks_do_not_change_the_scores(monkeypatch):
    data = random_data(5, n_users=60)
    n = data.n_baskets_per_user
    train, query = Instances(np.arange(40), n[:40] - 1), Instances(np.arange(60), n - 1)
    model = UpCf(r=3, alpha=0.5, q=5, tune=False).fit(data, train)
    whole = model.score(data, query)
    monkeypatch.setattr(up_cf, "_CHUNK_ELEMENTS", 1)  # one query per chunk
    np.testing.assert_array_equal(model.score(data, query), whole)


# --- by hand -----------------------------------------------------------------------------------

# u0 is the query: I = {0, 1, 2}; the pool is u1 (I = {0, 3}) and u2 (I = {1, 2}).
HAND = from_sequences([[[0, 1], [1, 2]], [[0], [3]], [[1, 2], [2]]], n_items=4)
HAND_POOL = Instances(np.array([1, 2]), np.array([1, 1]))
HAND_QUERY = Instances(np.array([0]), np.array([2]))


def test_a_hand_computed_case():
    # α = 1/2: sim(u0, u1) = 1 / sqrt(3 * 2), sim(u0, u2) = 2 / sqrt(3 * 2); q = 2 -> 1/6, 2/3.
    # r = None: p(u0) = (1/2, 1, 1/2, 0), p(u1) = (1/2, 0, 0, 1/2), p(u2) = (0, 1/2, 1, 0).
    model = UpCf(r=None, alpha=0.5, q=2, tune=False).fit(HAND, HAND_POOL)
    expected = [0.5 + 0.5 / 6, 1 + 0.5 * 2 / 3, 0.5 + 2 / 3, 0.5 / 6]
    np.testing.assert_allclose(model.score(HAND, HAND_QUERY), [expected], rtol=1e-6)
    # r = 1 (last baskets only): p(u0) = (0, 1, 1, 0), p(u1) = (0, 0, 0, 1), p(u2) = (0, 0, 1, 0).
    # α = 1: sim = overlap / |I_u0| = 1/3 and 2/3; q = 1.
    model = UpCf(r=1, alpha=1.0, q=1, tune=False).fit(HAND, HAND_POOL)
    np.testing.assert_allclose(model.score(HAND, HAND_QUERY), [[0, 1, 1 + 2 / 3, 1 / 3]], rtol=1e-6)
    # α = 0: sim = overlap / |I_v| = 1/2 and 2/2.
    model = UpCf(r=1, alpha=0.0, q=1, tune=False).fit(HAND, HAND_POOL)
    np.testing.assert_allclose(model.score(HAND, HAND_QUERY), [[0, 1, 2, 0.5]], rtol=1e-6)


def test_the_customer_counts_once_from_its_history_not_from_its_pool_row():
    # u0 is in the pool with a third basket [3] after its query history: that row is left out,
    # and u0's own term (weight 1) reads the history only.
    data = from_sequences([[[0, 1], [1, 2], [3]], [[0], [3]], [[1, 2], [2]]], n_items=4)
    pool = Instances(np.array([0, 1, 2]), np.array([2, 1, 1]))
    model = UpCf(r=None, alpha=0.5, q=2, tune=False).fit(data, pool)
    expected = [0.5 + 0.5 / 6, 1 + 0.5 * 2 / 3, 0.5 + 2 / 3, 0.5 / 6]
    np.testing.assert_allclose(model.score(data, HAND_QUERY), [expected], rtol=1e-6)


def test_an_empty_pool_overlap_leaves_the_own_popularity():
    data = from_sequences([[[0], [0, 1]], [[2], [3]]], n_items=4)
    model = UpCf(r=2, alpha=0.5, q=1, tune=False).fit(data, Instances(np.array([1]), np.array([1])))
    np.testing.assert_allclose(
        model.score(data, Instances(np.array([0]), np.array([2]))), [[1, 0.5, 0, 0]]
    )


# --- no leak -----------------------------------------------------------------------------------


def test_a_customer_s_own_target_never_reaches_its_score_on_a_temporal_split():
    """Fitted on every customer's baskets up to and including the test target (as a refit on
    all the data would be), a customer's test scores still ignore its own target basket."""
    data = random_data(6)
    test = make_split(data, "temporal")["test"]
    everything = Instances(test.users, test.n_history)  # visible: baskets 0..n-1, targets included
    model = UpCf(r=2, alpha=0.5, q=5, tune=False)
    before = model.fit(data, everything).score(data, test)
    seqs = [[list(b) for b in data.user_baskets(u)] for u in range(data.n_users)]
    for row, u in enumerate(test.users[:8]):
        changed = [list(s) for s in seqs]
        changed[u][-1] = list(range(data.n_items))  # u's target: every item
        other = from_sequences(changed, n_items=data.n_items)
        after = model.fit(other, everything).score(other, test)
        np.testing.assert_array_equal(after[row], before[row])
        assert not np.array_equal(after, before)  # the change does reach the other customers


def test_tuning_on_the_temporal_split_reads_no_test_target():
    data = random_data(7, n_users=60)
    split = make_split(data, "temporal")
    grid = {"r": (1, None), "alpha": (0.5, 1.0), "q": (1, 5)}
    seqs = [[list(b) for b in data.user_baskets(u)] for u in range(data.n_users)]
    for s in seqs:
        s[-1] = [0, 1, 2]  # every test target replaced
    other = from_sequences(seqs, n_items=data.n_items)
    fit = [UpCf(grid=grid).fit(d, split["train"], split["validate"]) for d in (data, other)]
    assert fit[0].params() == fit[1].params()
    np.testing.assert_array_equal(
        fit[0].score(data, split["test"]), fit[1].score(other, split["test"])
    )


# --- tuning ------------------------------------------------------------------------------------

GRID = {"r": (1, 3, None), "alpha": (0.25, 1.0), "q": (1, 10)}


def objective(model: UpCf, data: BasketData, inst: Instances) -> float:
    targets = data.targets(inst.users, inst.n_history)
    metrics = ranking_metrics(
        top_k(model.score(data, inst), 20), targets.values, targets.offsets, data.n_items, ks=(10, 20)
    )
    return (metrics["ndcg@10"] + metrics["ndcg@20"]) / 2


def test_tuning_picks_the_first_best_grid_point_on_validation():
    data = random_data(8, n_users=80)
    n = data.n_baskets_per_user
    train = Instances(np.arange(50), n[:50] - 1)
    validate = Instances(np.arange(50, 80), n[50:] - 1)
    model = UpCf(grid=GRID).fit(data, train, validate)
    chosen = model.params()
    assert chosen["tuned"] is True
    values = {
        (r, a, q): objective(UpCf(r=r, alpha=a, q=q, tune=False).fit(data, train), data, validate)
        for r, a, q in product(GRID["r"], GRID["alpha"], GRID["q"])
    }
    best = max(values.values())
    first = next(point for point, v in values.items() if v == pytest.approx(best, abs=1e-12))
    assert (chosen["r"], chosen["alpha"], chosen["q"]) == first
    assert chosen["validation_mean_ndcg@10,20"] == pytest.approx(best, abs=1e-12)
    assert len(set(values.values())) > 1, "a flat grid would not test the choice"


def test_windows_as_long_as_every_history_count_as_all_baskets():
    # random_data has at most 8 baskets: r = 25 and None score alike, and the first listed wins.
    data = random_data(9, n_users=60)
    n = data.n_baskets_per_user
    train, validate = Instances(np.arange(40), n[:40] - 1), Instances(np.arange(40, 60), n[40:] - 1)
    grid = {"r": (25, None), "alpha": (0.5,), "q": (5,)}
    assert UpCf(grid=grid).fit(data, train, validate).params()["r"] == 25
    assert UpCf(grid={**grid, "r": (None, 25)}).fit(data, train, validate).params()["r"] is None
    a = UpCf(r=25, alpha=0.5, q=5, tune=False).fit(data, train).score(data, validate)
    b = UpCf(r=None, alpha=0.5, q=5, tune=False).fit(data, train).score(data, validate)
    np.testing.assert_array_equal(a, b)


def test_large_validation_sets_are_subsampled_with_a_fixed_seed():
    data = random_data(10, n_users=60)
    n = data.n_baskets_per_user
    train, validate = Instances(np.arange(40), n[:40] - 1), Instances(np.arange(40, 60), n[40:] - 1)
    sampled = UpCf(grid=GRID, tune_sample=8, seed=3).fit(data, train, validate).params()
    keep = np.sort(np.random.default_rng(3).choice(20, size=8, replace=False))
    subset = Instances(validate.users[keep], validate.n_history[keep])
    whole = UpCf(grid=GRID, tune_sample=None).fit(data, train, subset).params()
    assert sampled == {**whole, "tune_sample": 8}


def test_no_tuning_without_validation_or_when_switched_off():
    data = random_data(11)
    n = data.n_baskets_per_user
    train, validate = Instances(np.arange(30), n[:30] - 1), Instances(np.arange(30, 40), n[30:] - 1)
    defaults = {"r": 5, "alpha": 0.25, "q": 5.0, "tuned": False}
    for model in (UpCf().fit(data, train), UpCf(tune=False).fit(data, train, validate)):
        assert {key: model.params()[key] for key in defaults} == defaults
    model = UpCf(grid=GRID).fit(data, train, validate)
    assert model.params()["tuned"] is True
    model.fit(data, train)  # a refit without validation goes back to the constructor's values
    assert {key: model.params()[key] for key in defaults} == defaults


def test_bad_options_fail_clearly():
    with pytest.raises(ValueError, match="unknown grid keys \\['k'\\]"):
        UpCf(grid={"k": (1,)})
    with pytest.raises(ValueError, match="recency window r must be an integer >= 1"):
        UpCf(r=0)
    with pytest.raises(ValueError, match="recency window"):
        UpCf(grid={"r": (2.5,)})
    with pytest.raises(ValueError, match="need 0 <= alpha <= 1 and q > 0"):
        UpCf(alpha=1.5)
    with pytest.raises(ValueError, match="need 0 <= alpha <= 1 and q > 0"):
        UpCf(grid={"q": (0,)})
    with pytest.raises(RuntimeError, match="call fit"):
        UpCf().score(HAND, HAND_QUERY)
    with pytest.raises(ValueError, match="fitted on 4 items but the data has 5"):
        UpCf(tune=False).fit(HAND, HAND_POOL).score(random_data(0, n_items=5), HAND_QUERY)
    assert UpCf(r=float("inf")).params()["r"] is None


# --- registry and command line -----------------------------------------------------------------


def test_registry_builds_it():
    model = make_baseline("up-cf", r=None, q=10, tune=False)
    assert isinstance(model, UpCf) and model.params()["r"] is None and model.params()["q"] == 10


def test_evaluate_up_cf_on_a_small_log(monkeypatch, capsys, log_csv, tmp_path):
    code, _, err = run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))
    assert code == 0, err
    result = tmp_path / "up-cf.json"
    code, out, err = run(
        monkeypatch, capsys, "evaluate", "--data", str(tmp_path / "ds"), "--model", "up-cf",
        "--output", str(result),
    )  # fmt: skip
    assert code == 0, err
    record = json.loads(result.read_text())
    assert record["model"] == "up-cf" and record["split"].startswith("temporal")
    assert record["params"]["tuned"] is True
    assert record["params"]["r"] in up_cf.DEFAULT_GRID["r"]
    for k in (10, 20):
        for m in ("recall", "ndcg", "phr"):
            assert 0 <= record["metrics"][f"{m}@{k}"] <= 1


# --- the measured numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("DC.json", [0.4798, 0.3463, 0.5729, 0.5566, 0.3680, 0.6456]),
        ("TaFeng.json", [0.1530, 0.1384, 0.4393, 0.2122, 0.1558, 0.5444]),
    ],
)
def test_reproduces_the_measured_numbers_with_the_tuned_hyperparameters(dnntsp, name, expected):
    """BENCHMARKS.md §15 (test users): validation chose r = 25, α = 0.75, q = 5 on both."""
    data = read_dnntsp_json(dnntsp(name))
    split = make_split(data, "predefined")
    test = split["test"]
    scores = UpCf(r=25, alpha=0.75, q=5, tune=False).fit(data, split["train"]).score(data, test)
    targets = data.targets(test.users, test.n_history)
    metrics = ranking_metrics(
        top_k(scores, 20), targets.values, targets.offsets, data.n_items, ks=(10, 20)
    )
    got = [metrics[f"{m}@{k}"] for k in (10, 20) for m in ("recall", "ndcg", "phr")]
    np.testing.assert_allclose(got, expected, atol=5e-5)
