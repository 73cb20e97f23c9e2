"""The fusion's choice on validation: both ends in the grid, TIFU-KNN's own tuning, the
per-customer criterion and metrics, the one-standard-error and floor rules, the pool cap."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.split import make_split
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.scoring.fusion import ScoreFusion
from basketgnn.scoring.fusion_choice import (
    choose_fusion,
    customer_criterion,
    customer_metrics,
    select_point,
    validation_criterion,
)
from basketgnn.scoring.tifu import TifuParams
from tests.support.scoring import random_data


def test_choice_includes_both_ends_and_is_at_least_as_good_as_either():
    data = random_data(3, n_users=80)
    sp = make_split(data, "temporal")
    val = sp["validate"]
    params = TifuParams(k=10, m=2, r_b=1.0, r_g=0.7, alpha=0.5)
    # A model that knows nothing: the choice must go (almost) all the way to TIFU.
    noise = np.random.default_rng(0).normal(size=(len(val), data.n_items)).astype(np.float32)
    fusion = choose_fusion(noise, data, sp["train"], val, tifu=params, chunk=16, rule="best")
    weights = {g.weight for g in fusion.grid}
    assert {0.0, 1.0} <= weights
    tifu_alone = next(g for g in fusion.grid if g.weight == 1.0 and g.alpha == 0.5)
    model_alone = next(g for g in fusion.grid if g.weight == 0.0)
    expected = validation_criterion(
        top_k(TifuKnn(**vars(params), tune=False).fit(data, sp["train"]).score(data, val), 20), data, val
    )
    assert tifu_alone.validation_criterion == pytest.approx(expected, abs=1e-6)
    best = max(g.validation_criterion for g in fusion.grid)
    assert best >= max(tifu_alone.validation_criterion, model_alone.validation_criterion)
    assert fusion.weight > 0 and fusion.summary()["validation_criterion"] == best
    assert fusion.summary()["tifu_alone"] == tifu_alone.validation_criterion
    assert fusion.summary()["model_alone"] == model_alone.validation_criterion
    # The chosen fusion ranks validation as the grid said.
    got = validation_criterion(top_k(fusion.apply(noise, data, val), 20), data, val)
    assert got == pytest.approx(best, abs=1e-6)
    # A model that knows the targets: fusion stays off.
    targets = data.targets(val.users, val.n_history)
    oracle = np.zeros((len(val), data.n_items), np.float32)
    oracle[np.repeat(np.arange(len(val)), np.diff(targets.offsets)), targets.values] = 10.0
    off = choose_fusion(oracle, data, sp["train"], val, tifu=params, rule="best")
    assert off.weight == 0.0 and off.scorer is None and off.prepare(data, val) is None
    assert "off" in off.describe() and "weight" in fusion.describe()


def test_tuned_tifu_equals_tifu_knns_own_tuning(monkeypatch):
    import basketgnn.scoring.fusion_choice as fusion_module

    data = random_data(4, n_users=60)
    sp = make_split(data, "temporal")
    grid = {"m": (1, 2), "r_b": (1.0,), "r_g": (0.7,), "k": (5, 10), "alpha": (0.2, 0.8)}
    tifu = TifuKnn(grid=grid).fit(data, sp["train"], sp["validate"])
    tune = fusion_module.tune_tifu
    monkeypatch.setattr(fusion_module, "tune_tifu", lambda *a, **kw: tune(*a, grid=grid, **kw))
    scores = np.zeros((len(sp["validate"]), data.n_items), np.float32)
    fusion = choose_fusion(scores, data, sp["train"], sp["validate"], alphas=())
    assert fusion.tifu_validation == pytest.approx(tifu.validation_score)
    assert fusion.scorer is not None and fusion.scorer.params == tifu.tifu_params


def test_per_customer_criterion_averages_to_the_metrics_criterion():
    data = random_data(5, n_users=50)
    sp = make_split(data, "temporal")
    ranked = top_k(np.random.default_rng(4).random((len(sp["test"]), data.n_items)), 20)
    per = customer_criterion(ranked, data, sp["test"])
    assert per.shape == (len(sp["test"]),) and ((per >= 0) & (per <= 1)).all()
    assert per.mean() == pytest.approx(validation_criterion(ranked, data, sp["test"]), abs=1e-12)


def test_one_standard_error_rule_keeps_a_part_unless_fusing_clearly_helps():
    data = random_data(3, n_users=80)
    sp = make_split(data, "temporal")
    val, params = sp["validate"], TifuParams(k=10, m=2, r_b=1.0, r_g=0.7, alpha=0.5)
    noise = np.random.default_rng(0).normal(size=(len(val), data.n_items)).astype(np.float32)
    for scale in (0.1, 1.0, 10.0):
        best = choose_fusion(scale * noise, data, sp["train"], val, tifu=params, rule="best")
        one_se = choose_fusion(scale * noise, data, sp["train"], val, tifu=params, rule="1se")
        sel = one_se.selection
        assert sel is not None and sel["rule"] == "1se"
        ends = [g.validation_criterion for g in one_se.grid if g.weight == 0 or (g.weight == 1 and g.alpha == 0.5)]
        chosen = next(g for g in one_se.grid if g.weight == one_se.weight and (one_se.weight == 0 or g.alpha == one_se.alpha))
        assert chosen.validation_criterion >= max(ends)  # never worse than a part on validation
        if (one_se.weight, one_se.alpha) != (best.weight, best.alpha):
            # Kept a part: the best point's gain was within one standard error.
            assert one_se.weight in (0.0, 1.0) and sel["gain_over_better_part"] <= sel["standard_error"]
        else:
            assert sel["gain_over_better_part"] > sel["standard_error"] or sel["gain_over_better_part"] == 0
    with pytest.raises(ValueError, match="unknown rule"):
        choose_fusion(noise, data, sp["train"], val, tifu=params, rule="worst")


def test_a_pool_cap_bounds_tifus_tuning_and_the_chosen_scorer(monkeypatch):
    import basketgnn.scoring.fusion_choice as fusion_module

    data = random_data(3, n_users=80)
    sp = make_split(data, "temporal")
    val = sp["validate"]
    noise = np.random.default_rng(0).normal(size=(len(val), data.n_items)).astype(np.float32)
    grid = {"m": (2,), "r_b": (1.0,), "r_g": (0.7,), "k": (5,), "alpha": (0.5,)}
    seen, real = [], fusion_module.tune_tifu

    def small_grid(data, train, validate, start, *args, **kwargs):
        seen.append(start.pool_cap)
        return real(data, train, validate, start, grid, *args, **kwargs)

    monkeypatch.setattr(fusion_module, "tune_tifu", small_grid)
    fusion = choose_fusion(noise, data, sp["train"], val, chunk=16, rule="best", pool_cap=20)
    assert seen == [20] and fusion.tuned_tifu.pool_cap == 20
    assert fusion.weight > 0 and fusion.scorer.vectors.n_rows == 20 < len(sp["train"])
    assert fusion.scorer.params.pool_cap == 20


def _metrics(**means):
    """Per-customer metrics of 4 customers whose means are ``means`` (the rest 0.5)."""
    names = [f"{m}@{k}" for k in (10, 20) for m in ("recall", "ndcg", "phr")]
    spread = np.array([-0.01, 0.01, -0.01, 0.01])
    return {n: means.get(n.replace("@", ""), 0.5) + spread for n in names}


def test_floor_rule_never_trades_a_tifu_metric_for_the_criterion():
    model, tifu, fused, other_alpha = (0.0, 0.2), (1.0, 0.2), (0.5, 0.2), (0.9, 0.8)
    points = [model, tifu, fused, other_alpha]
    per_metric = {
        model: _metrics(),  # criterion 0.5
        tifu: _metrics(ndcg10=0.6, ndcg20=0.6),  # the floor
        fused: _metrics(ndcg10=0.6, ndcg20=0.6, recall10=0.52),  # ≥ TIFU everywhere, a little better
        # The best criterion, but below TIFU-KNN's NDCG: what "1se" takes and "floor" must not.
        other_alpha: _metrics(recall10=0.9, recall20=0.9, ndcg10=0.59, ndcg20=0.59),
    }
    assert select_point(per_metric, points, [0.2, 0.8], "best")[0] == other_alpha
    assert select_point(per_metric, points, [0.2, 0.8], "1se")[0] == other_alpha
    chosen, why = select_point(per_metric, points, [0.2, 0.8], "floor")
    assert why["eligible"] == 2  # TIFU-KNN alone and the fused point
    # The fused point gains .02 / 6 on the criterion with no spread in the difference: > 1 SE.
    assert chosen == fused and why["gain_over_better_part"] > why["standard_error"]
    # With a gain inside one standard error the floor keeps TIFU-KNN alone.
    noisy = dict(per_metric)
    noisy[fused] = {**per_metric[tifu], "recall@10": per_metric[tifu]["recall@10"] + np.array([0.3, -0.29, 0.3, -0.29])}
    assert select_point(noisy, points, [0.2, 0.8], "floor")[0] == tifu
    # A model better than TIFU-KNN on every metric is eligible and wins as the better part.
    strong = {**per_metric, model: _metrics(recall10=0.7, recall20=0.7, ndcg10=0.7, ndcg20=0.7, phr10=0.7, phr20=0.7)}
    assert select_point(strong, points, [0.2, 0.8], "floor")[0] == model
    with pytest.raises(ValueError, match="unknown rule"):
        select_point(per_metric, points, [0.2, 0.8], "worst")


def test_at10_criterion_ranks_by_the_first_cut_off_and_keeps_the_six_metric_floor():
    model, tifu, at10, at20, low = (0.0, 0.2), (1.0, 0.2), (0.3, 0.2), (0.6, 0.2), (0.8, 0.2)
    points = [model, tifu, at10, at20, low]
    per_metric = {
        model: _metrics(),
        tifu: _metrics(),  # the floor: 0.5 everywhere
        at10: _metrics(phr10=0.56, recall10=0.53, phr20=0.51),  # mean of six 0.5167, of @10 0.53
        at20: _metrics(recall20=0.6, ndcg20=0.6, phr10=0.51),  # mean of six 0.535, of @10 0.5033
        # The best @10 of all, but under TIFU-KNN's PHR@20: the floor keeps it out either way.
        low: _metrics(recall10=0.7, ndcg10=0.7, phr10=0.7, phr20=0.49),
    }
    assert select_point(per_metric, points, [0.2], "floor")[0] == at20
    chosen, why = select_point(per_metric, points, [0.2], "floor", "at10")
    assert chosen == at10 and why["criterion"] == "at10" and why["eligible"] == 4
    # Gain on the @10 mean over the better part alone (TIFU-KNN, 0.5): (0.06 + 0.03) / 3.
    assert why["gain_over_better_part"] == pytest.approx(0.03, abs=1e-6)
    assert select_point(per_metric, points, [0.2], "best", "at10")[0] == low
    with pytest.raises(ValueError, match="unknown criterion"):
        select_point(per_metric, points, [0.2], "floor", "at5")


def test_customer_metrics_average_to_ranking_metrics_and_the_grid_keeps_them():
    data = random_data(6, n_users=60)
    sp = make_split(data, "temporal")
    test = sp["test"]
    ranked = top_k(np.random.default_rng(5).random((len(test), data.n_items)), 20)
    per = customer_metrics(ranked, data, test)
    targets = data.targets(test.users, test.n_history)
    expected = ranking_metrics(ranked, targets.values, targets.offsets, data.n_items, ks=(10, 20))
    assert list(per) == ["recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20", "phr@20"]
    for name, values in per.items():
        assert values.mean() == pytest.approx(expected[name], abs=1e-9), name
    val, params = sp["validate"], TifuParams(k=10, m=2, r_b=1.0, r_g=0.7, alpha=0.5)
    noise = np.random.default_rng(0).normal(size=(len(val), data.n_items)).astype(np.float32)
    fusion = choose_fusion(noise, data, sp["train"], val, tifu=params)
    floor = next(g for g in fusion.grid if g.weight == 1.0 and g.alpha == 0.5).metrics
    chosen = next(g for g in fusion.grid if g.weight == fusion.weight and (fusion.weight == 0 or g.alpha == fusion.alpha))
    assert all(chosen.metrics[n] >= floor[n] for n in floor)  # the floor holds on validation
    again = ScoreFusion.from_state(fusion.state())
    assert again.grid == fusion.grid and again.selection == fusion.selection
