"""The re-ranking stage: its candidates, its training instances, its network and loss, and what
learning it on validation decides."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from basketgnn.data.split import Instances, make_split
from basketgnn.nn.candidate_mlp import CandidateMLP, listwise_loss
from basketgnn.scoring import rerank
from basketgnn.scoring.fusion_choice import customer_criterion, customer_metrics
from basketgnn.scoring.item_pairs import PAIR_FEATURES, TOP
from basketgnn.scoring.rerank_features import FEATURES
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import TifuParams
from tests.support.planted import planted_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_top_candidates_are_the_largest_kept_items_then_the_most_popular():
    kept = SparseScores(
        np.array([0, 4, 5]), np.array([1, 2, 5, 7, 3]), np.array([0.5, 1.0, 0.5, 0.2, 1.0])
    )  # row 0: 2 -> 1.0, 1 and 5 -> 0.5 (tie: the lower item first), 7 -> 0.2; row 1: 3 only
    popularity = np.array([5.0, 1.0, 9.0, 9.0, 0.0, 3.0, 2.0, 0.5])
    got = rerank.top_candidates(kept, 3, popularity)
    np.testing.assert_array_equal(got, [[2, 1, 5], [3, 2, 0]])  # row 1 filled: 2 (9, lower than 3), then 0
    # Rows with none, some and every candidate kept, against a row-by-row fill.
    rng = np.random.default_rng(0)
    lengths = np.array([0, 2, 6, 9, 1])
    items = np.concatenate([np.sort(rng.choice(12, n, replace=False)) for n in lengths])
    many = SparseScores(np.concatenate([[0], np.cumsum(lengths)]), items, rng.integers(1, 4, len(items)) / 4)
    popular = rng.integers(0, 5, 12).astype(float)
    got = rerank.top_candidates(many, 6, popular)
    by_popularity = np.lexsort((np.arange(12), -popular))
    for r in range(len(lengths)):
        row_items = many.items[many.offsets[r] : many.offsets[r + 1]]
        row_values = many.values[many.offsets[r] : many.offsets[r + 1]]
        kept_first = row_items[np.lexsort((row_items, -row_values))][:6].tolist()
        fill = [i for i in by_popularity.tolist() if i not in kept_first][: 6 - len(kept_first)]
        assert got[r].tolist() == kept_first + fill


def test_adjacent_short_rows_are_filled_with_the_items_each_lacks():
    # Row 0's unfilled places must not read row 1's: the last item is the most popular.
    kept = SparseScores(np.array([0, 1, 2, 2]), np.array([0, 0]), np.array([1.0, 1.0]))
    got = rerank.top_candidates(kept, 3, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(got, [[0, 2, 1], [0, 2, 1], [2, 1, 0]])
    got = rerank.top_candidates(kept, 2, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(got, [[0, 2], [0, 2], [2, 1]])


def test_top_candidates_of_long_rows_with_many_ties_match_a_lexsort():
    # Rows longer than twice the cut take the compiled selection's sampled-threshold path.
    rng = np.random.default_rng(3)
    lengths = np.array([0, 1, 19, 20, 21, 45, 300, 999])
    items = np.concatenate([np.sort(rng.choice(1000, n, replace=False)) for n in lengths])
    values = rng.integers(0, 6, len(items)) / 5  # many equal values within a row
    kept = SparseScores(np.concatenate([[0], np.cumsum(lengths)]), items, values.astype(np.float32))
    popular = rng.random(1000)
    got = rerank.top_candidates(kept, 20, popular)
    for r in range(len(lengths)):
        lo, hi = kept.offsets[r], kept.offsets[r + 1]
        want = items[lo:hi][np.lexsort((items[lo:hi], -values[lo:hi]))][:20]
        assert got[r, : len(want)].tolist() == want.tolist()
    assert (got[:2] >= 0).all() and len(np.unique(got[2])) == 20  # short rows are filled


def test_the_stage_scores_in_blocks_as_in_one_pass(monkeypatch):
    torch.manual_seed(0)
    net = CandidateMLP(5, hidden=8)
    net.standardise_with(torch.randn(10, 4, 5))
    stage = rerank.RerankStage(None, None, net.eval())
    x = np.random.default_rng(0).normal(size=(37, 11, 5)).astype(np.float32)
    with torch.inference_mode():
        want = net(torch.from_numpy(x)).numpy()
    monkeypatch.setattr(rerank, "SCORE_ROWS", 16)  # 407 rows: 25 full blocks and a part
    np.testing.assert_array_equal(stage.scores(x), want)
    assert stage.scores(x[:0]).shape == (0, 11)
    flat = torch.from_numpy(x.reshape(-1, 5))
    with torch.inference_mode():
        got = net.score_rows(flat)
    np.testing.assert_array_equal(got.numpy(), want.reshape(-1))  # in place, the same bits
    np.testing.assert_array_equal(flat.numpy(), x.reshape(-1, 5))  # and the input untouched
    with torch.inference_mode():
        hidden = net.layers[0]((flat - net.mean) / net.std)
    assert (hidden < 0).any() and (hidden > 0).any()  # the first ReLU clips some and keeps some


def test_training_instances_are_each_customers_last_targets_sampled_when_many():
    train = Instances(np.array([0, 1, 2]), np.array([5, 2, 1]))
    got = rerank.training_instances(train, prefixes=3, sample=100)
    assert list(zip(got.users.tolist(), got.n_history.tolist())) == [(0, 3), (0, 4), (0, 5), (1, 1), (1, 2), (2, 1)]
    few = rerank.training_instances(train, prefixes=3, sample=4, seed=1)
    assert len(few) == 4 and set(zip(few.users.tolist(), few.n_history.tolist())) <= set(zip(got.users.tolist(), got.n_history.tolist()))


def test_listwise_loss_is_the_cross_entropy_with_the_target_spread_over_its_candidates():
    scores = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5], [1.0, 2.0, 3.0]])
    labels = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    p0 = torch.softmax(scores[0], 0)
    p2 = torch.softmax(scores[2], 0)
    want = (-(math.log(p0[0]) + math.log(p0[1])) / 2 - math.log(p2[2])) / 2  # row 1 has no target
    assert float(listwise_loss(scores, labels)) == pytest.approx(want, rel=1e-6)


def test_the_network_standardises_with_the_training_features():
    torch.manual_seed(0)
    net = CandidateMLP(3, hidden=4)
    x = torch.randn(5, 7, 3) * torch.tensor([2.0, 0.0, 5.0]) + torch.tensor([1.0, 4.0, -3.0])
    net.standardise_with(x)
    flat = x.reshape(-1, 3).double()
    np.testing.assert_allclose(net.mean.numpy(), flat.mean(0).numpy(), rtol=1e-5, atol=1e-6)
    assert float(net.std[1]) == 1.0  # a constant feature is left unscaled
    assert net(x).shape == (5, 7)


def test_the_criterion_at10_averages_the_metrics_at_10_only():
    data = planted_data(n_users=50, n_items=30)
    inst = make_split(data, "temporal")["test"]
    ranked = np.stack([np.random.default_rng(i).permutation(30)[:20] for i in range(len(inst))])
    metrics = customer_metrics(ranked, data, inst)
    np.testing.assert_allclose(customer_criterion(ranked, data, inst), np.mean(list(metrics.values()), axis=0))
    at10 = customer_criterion(ranked, data, inst, "at10")
    np.testing.assert_allclose(at10, (metrics["recall@10"] + metrics["ndcg@10"] + metrics["phr@10"]) / 3)
    assert at10.shape == (len(inst),) and not np.allclose(at10, customer_criterion(ranked, data, inst))


def fit(data, sp, seed=0, epochs=3):
    logits = lambda inst, items: np.zeros(items.shape, np.float32)  # noqa: E731 - a model that knows nothing
    shipped = np.tile(np.arange(20), (len(sp["validate"]), 1))  # a poor shipped ranking: items 0..19
    return rerank.fit_stage(logits, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped,
                            seed=seed, epochs=epochs)  # fmt: skip


def test_the_stage_learns_deterministically_and_beats_a_poor_shipped_ranking():
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    stage, record = fit(data, sp)
    again, record2 = fit(data, sp)
    assert {k: v for k, v in record.items() if k != "seconds"} == {k: v for k, v in record2.items() if k != "seconds"}
    for name, value in stage.net.state_dict().items():
        torch.testing.assert_close(value, again.net.state_dict()[name], rtol=0, atol=0)
    # The planted favourites are repeats: the stage ranks them well above items 0..19 in order.
    assert record["kept"] and record["gain"] > record["standard_error"] > 0
    assert record["validation_criterion"] == max(record["by_epoch"]) and 1 <= record["epoch"] <= 3
    assert record["training_instances"] == len(rerank.training_instances(sp["train"], record["prefixes"]))
    # Each number of training targets is tried and the best on validation is the stage.
    assert set(record["prefix_criteria"]) == {str(p) for p in rerank.PREFIX_CHOICES}
    assert record["validation_criterion"] == max(record["prefix_criteria"].values())
    assert record["prefix_criteria"][str(record["prefixes"])] == record["validation_criterion"]
    items, scores = stage.order(data, sp["test"], lambda inst, it: np.zeros(it.shape, np.float32))
    candidates, _ = stage.candidate_items(data, sp["test"])
    assert items.shape == (len(sp["test"]), 40) and (np.diff(scores, axis=1) <= 0).all()
    np.testing.assert_array_equal(np.sort(items, axis=1), np.sort(candidates, axis=1))  # a reordering
    loaded = rerank.RerankStage.from_state(stage.state())
    for a, b in zip(loaded.order(data, sp["test"], lambda inst, it: np.zeros(it.shape, np.float32)), (items, scores)):
        np.testing.assert_array_equal(a, b)


def test_the_stage_is_not_kept_where_the_shipped_ranking_is_as_good():
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    stage, _ = fit(data, sp)
    best = stage.order(data, sp["validate"], lambda inst, it: np.zeros(it.shape, np.float32))[0][:, :20]
    logits = lambda inst, items: np.zeros(items.shape, np.float32)  # noqa: E731
    _, record = rerank.fit_stage(logits, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), best, epochs=3)
    assert not record["kept"] and record["gain"] <= record["standard_error"]
    assert "not kept" in record["description"]


def test_a_stage_without_item_pairs_reads_the_first_columns_and_loads_as_stored():
    """``pairs=0`` learns on :data:`FEATURES` alone; a stored stage keeps its own columns, and a
    state whose columns this version does not compute is refused by name."""
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    zeros = lambda inst, it: np.zeros(it.shape, np.float32)  # noqa: E731
    shipped = np.tile(np.arange(20), (len(sp["validate"]), 1))
    plain, record = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped, epochs=2, pairs=0)
    paired, record2 = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped,
                                       epochs=2, choose_pairs=False)  # fmt: skip
    assert plain.pairs is None and plain.features == FEATURES and record["item_pairs"] == 0
    assert paired.features == FEATURES + PAIR_FEATURES and record2["item_pairs"] == TOP
    assert plain.net.layers[0].in_features == len(FEATURES) and paired.net.layers[0].in_features == len(FEATURES) + 2
    for stage in (plain, paired):
        loaded = rerank.RerankStage.from_state(stage.state())
        assert loaded.features == stage.features
        for a, b in zip(loaded.order(data, sp["test"], zeros), stage.order(data, sp["test"], zeros)):
            np.testing.assert_array_equal(a, b)
    _, x = paired.prepare(data, sp["test"])
    assert x.shape[-1] == len(FEATURES) + 2 and (x[..., -1] > 0).any()
    state = {**paired.state(), "features": list(FEATURES) + ["something_else", "item_pairs_max"]}
    with pytest.raises(ValueError, match="learned on the features .*something_else"):
        rerank.RerankStage.from_state(state)


def test_one_number_of_training_targets_learns_the_same_network_as_its_choice_among_several():
    """With ``prefixes=(p,)`` the stage is p's network of a run that also tried others: each
    starts from the same weights and learns on its own instances, though they are prepared
    together."""
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    zeros = lambda inst, it: np.zeros(it.shape, np.float32)  # noqa: E731
    shipped = np.tile(np.arange(20), (len(sp["validate"]), 1))
    both, record = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped, epochs=2)
    assert len(rerank.training_instances(sp["train"], 4)) < len(rerank.training_instances(sp["train"], 12))
    for p in rerank.PREFIX_CHOICES:  # each learns on its own instances, prepared with the others
        alone, single = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped,
                                         epochs=2, prefixes=(p,))  # fmt: skip
        assert single["prefix_criteria"] == {str(p): record["prefix_criteria"][str(p)]}
        assert single["by_epoch"] == record["by_epoch"] or p != record["prefixes"]
    alone, _ = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped,
                                epochs=2, prefixes=(record["prefixes"],))  # fmt: skip
    for name, value in both.net.state_dict().items():
        torch.testing.assert_close(value, alone.net.state_dict()[name], rtol=0, atol=0)
    assert f"last {record['prefixes']} baskets" in record["description"]


def test_the_features_prepared_in_parts_on_two_threads_learn_the_stage_of_one_pass(monkeypatch):
    """Learning prepares the instances' features in parts that the threads share: the same
    stage, record and weights as from one part on one thread."""
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    zeros = lambda inst, it: np.zeros(it.shape, np.float32)  # noqa: E731
    shipped = np.tile(np.arange(20), (len(sp["validate"]), 1))
    calls, in_parts = [], rerank.in_parts

    def recording_parts(run, parts, threads):
        calls.append((len(parts), threads))
        return in_parts(run, parts, threads)

    def run(threads):
        return rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped, epochs=3,
                                threads=threads)  # fmt: skip

    whole, rec0 = run(1)  # validation and training instances each in one part
    monkeypatch.setattr(rerank, "in_parts", recording_parts)
    monkeypatch.setattr(rerank, "PREPARE_ROWS", 16)
    for stage, record in (run(1), run(2)):
        assert {k: v for k, v in record.items() if k != "seconds"} == {k: v for k, v in rec0.items() if k != "seconds"}
        for name, value in stage.net.state_dict().items():
            torch.testing.assert_close(value, whole.net.state_dict()[name], rtol=0, atol=0)
    assert len(calls) == 4 and all(n > 1 for n, _ in calls) and [t for _, t in calls] == [1, 1, 2, 2]
    # The features themselves: parts of 16 on two threads against one part.
    logits = lambda inst, it: it.astype(np.float32) / 7  # noqa: E731 - a score column that is not constant
    parted = rerank._features(whole, logits, data, sp["validate"], 2)
    monkeypatch.setattr(rerank, "PREPARE_ROWS", 10**6)
    for a, b in zip(parted, rerank._features(whole, logits, data, sp["validate"], 1)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("pairs_win", [True, False])
def test_the_item_pairs_stay_only_where_they_beat_the_stage_without_them(monkeypatch, pairs_win):
    """With pairs asked for, the network without the pair columns is learned on the chosen
    targets and compared by the one-standard-error rule: left out, the stage is bit for bit the
    one ``pairs=0`` learns on those targets, and the record says why."""
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    zeros = lambda inst, it: np.zeros(it.shape, np.float32)  # noqa: E731
    shipped = np.tile(np.arange(20), (len(sp["validate"]), 1))
    calls, paired_gain = [], rerank.paired_gain

    def decided(better, base):  # the first comparison is the pairs', the second the shipped one's
        calls.append((better.copy(), base.copy()))
        gain, se = paired_gain(better, base)
        if len(calls) == 1:
            return (abs(gain) + 1.0, se) if pairs_win else (gain, abs(gain) + 1.0)
        return gain, se

    monkeypatch.setattr(rerank, "paired_gain", decided)
    stage, record = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped, epochs=2)
    assert len(calls) == 2 and record["item_pairs"] == TOP and record["item_pairs_kept"] is pairs_win
    with_pairs = record["prefix_criteria"][str(record["prefixes"])]
    assert record["with_pairs_criterion"] == with_pairs
    np.testing.assert_allclose(calls[0][0].mean(), with_pairs, atol=1e-6)
    np.testing.assert_allclose(calls[0][1].mean(), record["without_pairs_criterion"], atol=1e-6)
    np.testing.assert_array_equal(calls[1][0], calls[0][0] if pairs_win else calls[0][1])  # the stage's own values
    chosen = with_pairs if pairs_win else record["without_pairs_criterion"]
    assert record["validation_criterion"] == chosen == max(record["by_epoch"])
    monkeypatch.setattr(rerank, "paired_gain", paired_gain)
    plain, plain_record = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped,
                                           epochs=2, pairs=0, prefixes=(record["prefixes"],))  # fmt: skip
    assert plain_record["item_pairs_kept"] is False and "without_pairs_criterion" not in plain_record
    assert plain_record["validation_criterion"] == record["without_pairs_criterion"]
    forced, forced_record = rerank.fit_stage(zeros, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), shipped,
                                             epochs=2, choose_pairs=False)  # fmt: skip
    assert len(calls) == 2 and forced.pairs is not None and forced_record["item_pairs_kept"] is True  # no comparison
    assert forced_record["validation_criterion"] == with_pairs and "without_pairs_criterion" not in forced_record
    if pairs_win:
        assert stage.pairs is not None and stage.features == FEATURES + PAIR_FEATURES
        assert "with item pairs (top 150)" in record["description"]
        return
    assert stage.pairs is None and stage.features == FEATURES and "without item pairs (top 150 tried" in record["description"]
    assert {k: record[k] for k in ("epoch", "by_epoch", "kept", "gain")} == {k: plain_record[k] for k in ("epoch", "by_epoch", "kept", "gain")}
    for name, value in stage.net.state_dict().items():
        torch.testing.assert_close(value, plain.net.state_dict()[name], rtol=0, atol=0)
    loaded = rerank.RerankStage.from_state(stage.state())
    assert loaded.pairs is None
    for a, b in zip(loaded.order(data, sp["test"], zeros), plain.order(data, sp["test"], zeros)):
        np.testing.assert_array_equal(a, b)


def test_the_first_k_of_the_stages_order_are_those_of_its_full_stable_sort():
    """:func:`stable_top_k` against ``np.argsort(-s, kind="stable")`` on rows with many ties, and
    the stage's order cut to k against its full order."""
    from basketgnn.scoring.topk_kernel import stable_top_k

    rng = np.random.default_rng(3)
    s = rng.integers(-3, 4, size=(200, 30)).astype(np.float32)  # few values: ties everywhere
    s[:, 5] = -0.0
    s[:, 6] = 0.0  # +0.0 and -0.0 are equal: position order
    s[:50] = rng.normal(size=(50, 30)).astype(np.float32)
    full = np.argsort(-s, axis=1, kind="stable")
    for k in (1, 2, 7, 29, 30):
        np.testing.assert_array_equal(stable_top_k(s, k), full[:, :k])
    data = planted_data(n_users=150, n_items=40)
    sp = make_split(data, "temporal")
    stage, _ = fit(data, sp, epochs=2)
    logits = lambda inst, it: (it % 3).astype(np.float32)  # noqa: E731 - a score with ties
    items, scores = stage.order(data, sp["test"], logits)
    for k in (1, 5, 39, 40, 41):
        got = stage.order(data, sp["test"], logits, k)
        np.testing.assert_array_equal(got[0], items[:, :k])
        np.testing.assert_array_equal(got[1], scores[:, :k])
    assert stage.order(data, Instances(sp["test"].users[:0], sp["test"].n_history[:0]), logits, 5)[0].shape == (0, 5)
