"""Tests for basketgnn.metrics: hand-computed cases, a loop reference, properties, top_k ties."""

from __future__ import annotations

import math

import numpy as np
import pytest

from basketgnn.metrics import KS, metrics_table, ranking_metrics, top_k

LOG2_3 = math.log2(3)
LOG2_5 = math.log2(5)


def csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    items = np.array([i for lst in lists for i in lst], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(lst) for lst in lists])]).astype(np.int64)
    return items, offsets


def reference_metrics(
    topk: np.ndarray,
    targets: list[list[int]],
    histories: list[list[int]] | None,
    ks: tuple[int, ...],
) -> dict[str, float]:
    """Direct transcription of the definitions with plain Python loops over users."""

    def per_user(ranking: list[int], target: set[int], k: int) -> tuple[float, float, float]:
        top = ranking[:k]
        n_hit = sum(1 for item in top if item in target)
        dcg = sum(1.0 / math.log2(r + 2) for r, item in enumerate(top) if item in target)
        idcg = sum(1.0 / math.log2(r + 2) for r in range(min(k, len(target))))
        return n_hit / len(target), dcg / idcg, float(n_hit > 0)

    variants: dict[str, list[set[int]]] = {"": [set(t) for t in targets]}
    if histories is not None:
        variants["repeat_"] = [set(t) & set(h) for t, h in zip(targets, histories)]
        variants["explore_"] = [set(t) - set(h) for t, h in zip(targets, histories)]
    out: dict[str, float] = {}
    for prefix, user_targets in variants.items():
        for k in ks:
            rows = [per_user(list(topk[u]), t, k) for u, t in enumerate(user_targets) if len(t) > 0]
            for j, m in enumerate(("recall", "ndcg", "phr")):
                out[f"{prefix}{m}@{k}"] = sum(r[j] for r in rows) / len(rows) if rows else math.nan
    return out


def assert_metrics_equal(got: dict[str, float], want: dict[str, float]) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if math.isnan(value):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def random_case(
    rng: np.random.Generator, n_users: int, n_items: int, k_max: int
) -> tuple[np.ndarray, list[list[int]], list[list[int]]]:
    topk = np.stack([rng.permutation(n_items)[:k_max] for _ in range(n_users)])
    targets, histories = [], []
    for u in range(n_users):
        size = int(rng.integers(1, 12))
        # Half the targets come from the ranking so that hits are common, then add duplicates.
        target = list(rng.choice(n_items, size=size, replace=True))
        target += list(rng.choice(topk[u], size=int(rng.integers(0, 4)), replace=False))
        target += target[: int(rng.integers(0, 3))]
        targets.append([int(i) for i in target])
        if u % 5 == 0:
            histories.append([])
        elif u % 5 == 1:
            # No overlap with the target at all: the user only counts for explore.
            pool = np.setdiff1d(np.arange(n_items), target)
            histories.append([int(i) for i in rng.choice(pool, size=6)])
        else:
            history = list(rng.choice(n_items, size=int(rng.integers(1, 30))))
            history += list(rng.choice(target, size=int(rng.integers(0, 3))))
            histories.append([int(i) for i in history])
    return topk, targets, histories


# ---------------------------------------------------------------------------------------------
# Hand-computed cases
# ---------------------------------------------------------------------------------------------


def test_hand_computed_two_users() -> None:
    # 6 items. user 0 ranks [2, 0, 5, 1, 3], target {0, 1}
    #   @1: hits []        recall 0,   ndcg 0,                              phr 0
    #   @2: hits at r=2    recall 1/2, ndcg (1/log2 3) / (1 + 1/log2 3),      phr 1
    #   @3: same hits      recall 1/2, ndcg same as @2 (IDCG caps at |T|=2), phr 1
    # user 1 ranks [4, 3, 0, 1, 2], target {4}
    #   @1,2,3: hit at r=1 recall 1, ndcg 1/1 = 1, phr 1
    topk = np.array([[2, 0, 5, 1, 3], [4, 3, 0, 1, 2]])
    items, offsets = csr([[0, 1], [4]])
    got = ranking_metrics(topk, items, offsets, n_items=6, ks=(1, 2, 3))
    u0_ndcg = (1 / LOG2_3) / (1 + 1 / LOG2_3)
    want = {
        "recall@1": (0 + 1) / 2,
        "ndcg@1": (0 + 1) / 2,
        "phr@1": (0 + 1) / 2,
        "recall@2": (0.5 + 1) / 2,
        "ndcg@2": (u0_ndcg + 1) / 2,
        "phr@2": 1.0,
        "recall@3": (0.5 + 1) / 2,
        "ndcg@3": (u0_ndcg + 1) / 2,
        "phr@3": 1.0,
    }
    assert_metrics_equal(got, want)


def test_hand_computed_ndcg_with_large_target() -> None:
    # One user, ranking [0, 1, 2, 3], target {1, 3, 5, 7} (|T| = 4 > K).
    # @2: hit at r=2 -> DCG = 1/log2 3, IDCG = 1 + 1/log2 3;           recall 1/4
    # @4: hits r=2,4 -> DCG = 1/log2 3 + 1/log2 5,
    #     IDCG = 1 + 1/log2 3 + 1/2 + 1/log2 5;                         recall 2/4
    topk = np.array([[0, 1, 2, 3]])
    items, offsets = csr([[1, 3, 5, 7]])
    got = ranking_metrics(topk, items, offsets, n_items=8, ks=(2, 4))
    assert got["recall@2"] == pytest.approx(0.25)
    assert got["recall@4"] == pytest.approx(0.5)
    assert got["ndcg@2"] == pytest.approx((1 / LOG2_3) / (1 + 1 / LOG2_3))
    assert got["ndcg@4"] == pytest.approx(
        (1 / LOG2_3 + 1 / LOG2_5) / (1 + 1 / LOG2_3 + 0.5 + 1 / LOG2_5)
    )
    assert got["phr@2"] == got["phr@4"] == 1.0


def test_hand_computed_repeat_explore() -> None:
    # 6 items, ks = (1, 2).
    # user 0: ranking [1, 2, 3], target {1, 4}, history {1, 5} -> T_rep {1}, T_exp {4}
    #   repeat  @1: hit r=1 -> recall 1, ndcg 1, phr 1;  @2: same
    #   explore @1,@2: no hit -> 0, 0, 0
    # user 1: ranking [0, 5, 2], target {5}, history {} -> T_rep {}, T_exp {5}
    #   excluded from repeat; explore @1: 0, 0, 0;  @2: hit r=2 -> recall 1,
    #   ndcg (1/log2 3) / 1, phr 1
    # repeat averages over user 0 only; explore over both.
    topk = np.array([[1, 2, 3], [0, 5, 2]])
    t_items, t_offsets = csr([[1, 4], [5]])
    h_items, h_offsets = csr([[1, 5, 1], []])
    got = ranking_metrics(topk, t_items, t_offsets, 6, h_items, h_offsets, ks=(1, 2))
    for k in (1, 2):
        assert got[f"repeat_recall@{k}"] == 1.0
        assert got[f"repeat_ndcg@{k}"] == 1.0
        assert got[f"repeat_phr@{k}"] == 1.0
    assert got["explore_recall@1"] == 0.0
    assert got["explore_ndcg@1"] == 0.0
    assert got["explore_phr@1"] == 0.0
    assert got["explore_recall@2"] == pytest.approx(0.5)
    assert got["explore_ndcg@2"] == pytest.approx((0 + 1 / LOG2_3) / 2)
    assert got["explore_phr@2"] == pytest.approx(0.5)
    # Overall @2: user 0 recall 1/2, ndcg 1/(1 + 1/log2 3); user 1 recall 1, ndcg 1/log2 3.
    assert got["recall@2"] == pytest.approx(0.75)
    assert got["ndcg@2"] == pytest.approx((1 / (1 + 1 / LOG2_3) + 1 / LOG2_3) / 2)


def test_repeat_is_nan_when_no_user_has_repeat_targets() -> None:
    topk = np.array([[0, 1], [1, 0]])
    t_items, t_offsets = csr([[0], [1]])
    h_items, h_offsets = csr([[2], [3, 2]])
    got = ranking_metrics(topk, t_items, t_offsets, 4, h_items, h_offsets, ks=(1, 2))
    for m in ("recall", "ndcg", "phr"):
        for k in (1, 2):
            assert math.isnan(got[f"repeat_{m}@{k}"])
            assert got[f"explore_{m}@{k}"] == got[f"{m}@{k}"]


def test_explore_is_nan_when_all_targets_are_repeats() -> None:
    topk = np.array([[0, 1], [1, 0]])
    t_items, t_offsets = csr([[0], [1, 1]])
    h_items, h_offsets = csr([[0, 3], [1]])
    got = ranking_metrics(topk, t_items, t_offsets, 4, h_items, h_offsets, ks=(1, 2))
    assert math.isnan(got["explore_recall@1"])
    assert got["repeat_recall@1"] == 1.0


def test_keys_default_ks() -> None:
    rng = np.random.default_rng(0)
    topk, targets, histories = random_case(rng, 8, 60, 40)
    t_items, t_offsets = csr(targets)
    plain = ranking_metrics(topk, t_items, t_offsets, 60)
    assert set(plain) == {f"{m}@{k}" for m in ("recall", "ndcg", "phr") for k in KS}
    h_items, h_offsets = csr(histories)
    full = ranking_metrics(topk, t_items, t_offsets, 60, h_items, h_offsets)
    assert set(full) == {
        f"{p}{m}@{k}"
        for p in ("", "repeat_", "explore_")
        for m in ("recall", "ndcg", "phr")
        for k in KS
    }
    assert all(isinstance(v, float) for v in full.values())


# ---------------------------------------------------------------------------------------------
# Reference comparison and properties
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_loop_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_items, k_max = 120, 45
    topk, targets, histories = random_case(rng, 300, n_items, k_max)
    t_items, t_offsets = csr(targets)
    h_items, h_offsets = csr(histories)
    got = ranking_metrics(topk, t_items, t_offsets, n_items, h_items, h_offsets)
    assert_metrics_equal(got, reference_metrics(topk, targets, histories, KS))
    got_plain = ranking_metrics(topk, t_items, t_offsets, n_items, ks=(1, 5, 45))
    assert_metrics_equal(got_plain, reference_metrics(topk, targets, None, (1, 5, 45)))


def test_matches_reference_with_top_k_output() -> None:
    rng = np.random.default_rng(7)
    n_users, n_items = 200, 90
    scores = rng.integers(0, 5, size=(n_users, n_items)).astype(np.float32)
    ranked = top_k(scores, 40)
    _, targets, histories = random_case(rng, n_users, n_items, 40)
    t_items, t_offsets = csr(targets)
    h_items, h_offsets = csr(histories)
    got = ranking_metrics(ranked, t_items, t_offsets, n_items, h_items, h_offsets)
    assert_metrics_equal(got, reference_metrics(ranked, targets, histories, KS))


def test_values_in_unit_interval() -> None:
    rng = np.random.default_rng(3)
    topk, targets, histories = random_case(rng, 400, 80, 40)
    t_items, t_offsets = csr(targets)
    h_items, h_offsets = csr(histories)
    got = ranking_metrics(topk, t_items, t_offsets, 80, h_items, h_offsets)
    values = np.array([v for v in got.values() if not math.isnan(v)])
    assert values.size == len(got)
    assert ((values >= 0) & (values <= 1)).all()


def test_metrics_monotone_in_k_for_recall_and_phr() -> None:
    rng = np.random.default_rng(4)
    topk, targets, _ = random_case(rng, 300, 80, 40)
    t_items, t_offsets = csr(targets)
    got = ranking_metrics(topk, t_items, t_offsets, 80)
    for m in ("recall", "phr"):
        series = [got[f"{m}@{k}"] for k in KS]
        assert series == sorted(series)


def test_perfect_ranking_scores_one() -> None:
    rng = np.random.default_rng(5)
    n_users, n_items, k_max = 100, 200, 40
    targets, rows = [], []
    for _ in range(n_users):
        target = rng.choice(n_items, size=int(rng.integers(1, 11)), replace=False)
        rest = rng.permutation(np.setdiff1d(np.arange(n_items), target))
        rows.append(np.concatenate([target, rest])[:k_max])
        targets.append([int(i) for i in target])
    topk = np.stack(rows)
    t_items, t_offsets = csr(targets)
    # Every |T| <= 10 = min(KS), so all cut-offs are perfect.
    got = ranking_metrics(topk, t_items, t_offsets, n_items)
    for key, value in got.items():
        assert value == pytest.approx(1.0, abs=1e-12), key


def test_target_order_and_duplicates_do_not_matter() -> None:
    rng = np.random.default_rng(6)
    topk, targets, histories = random_case(rng, 200, 70, 40)
    h_items, h_offsets = csr(histories)
    base = ranking_metrics(topk, *csr(targets), 70, h_items, h_offsets)

    shuffled = [[int(i) for i in rng.permutation(t)] for t in targets]
    assert_metrics_equal(ranking_metrics(topk, *csr(shuffled), 70, h_items, h_offsets), base)

    deduped = [sorted(set(t)) for t in targets]
    assert_metrics_equal(ranking_metrics(topk, *csr(deduped), 70, h_items, h_offsets), base)

    tripled = [t + t[::-1] + t for t in targets]
    assert_metrics_equal(ranking_metrics(topk, *csr(tripled), 70, h_items, h_offsets), base)

    hist_dup = [h + h for h in histories]
    assert_metrics_equal(ranking_metrics(topk, *csr(targets), 70, *csr(hist_dup)), base)


def test_extra_topk_columns_are_ignored() -> None:
    rng = np.random.default_rng(8)
    topk, targets, _ = random_case(rng, 100, 90, 60)
    t_items, t_offsets = csr(targets)
    assert_metrics_equal(
        ranking_metrics(topk, t_items, t_offsets, 90),
        ranking_metrics(topk[:, :40], t_items, t_offsets, 90),
    )


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_empty_target_raises() -> None:
    topk = np.array([[0, 1], [1, 0]])
    items, offsets = csr([[0], []])
    with pytest.raises(ValueError, match="empty target"):
        ranking_metrics(topk, items, offsets, 3, ks=(1, 2))


def test_k_max_too_small_raises() -> None:
    topk = np.array([[0, 1], [1, 0]])
    items, offsets = csr([[0], [1]])
    with pytest.raises(ValueError, match="k_max=2 .*max\\(ks\\)=3"):
        ranking_metrics(topk, items, offsets, 3, ks=(1, 3))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_offsets": np.array([0, 1])}, "target_offsets must have length"),
        ({"target_offsets": np.array([0, 1, 3])}, "must start at 0 and end at"),
        ({"target_items": np.array([0, 9])}, "target_items must lie in"),
        ({"topk": np.array([[0, 0], [1, 0]])}, "repeated items"),
        ({"topk": np.array([[0, 5], [1, 0]])}, "topk entries must lie in"),
        ({"topk": np.array([0, 1])}, "topk must be 2-D"),
        ({"history_items": np.array([0])}, "given together"),
        (
            {"history_items": np.array([0]), "history_offsets": np.array([0, 1])},
            "history_offsets must have length",
        ),
    ],
)
def test_invalid_inputs_raise(kwargs: dict[str, np.ndarray], match: str) -> None:
    args: dict = {
        "topk": np.array([[0, 1], [1, 0]]),
        "target_items": np.array([0, 1]),
        "target_offsets": np.array([0, 1, 2]),
        "n_items": 3,
        "ks": (1, 2),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ranking_metrics(**args)


# ---------------------------------------------------------------------------------------------
# top_k
# ---------------------------------------------------------------------------------------------


def test_top_k_ties_lower_index_first() -> None:
    scores = np.array([[1.0, 3.0, 3.0, 0.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(top_k(scores, 4), [[1, 2, 4, 0], [0, 1, 2, 3]])
    np.testing.assert_array_equal(top_k(scores, 2), [[1, 2], [0, 1]])
    np.testing.assert_array_equal(top_k(scores, 6), [[1, 2, 4, 0, 5, 3], [0, 1, 2, 3, 4, 5]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("k", [1, 7, 40, 50])
def test_top_k_matches_stable_argsort(dtype: type, k: int) -> None:
    rng = np.random.default_rng(k)
    # Few distinct values -> many ties everywhere, including at the k-th position.
    scores = rng.integers(-3, 4, size=(300, 50)).astype(dtype)
    scores[::7] = 1
    # Rows without ties at the cut-off take a different code path than tied ones; mix both.
    scores[1::3] = rng.permutation(np.arange(50)).astype(dtype) * 3
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    got = top_k(scores, k)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


def test_top_k_handles_infinities_and_signed_zero() -> None:
    scores = np.array([[0.0, -np.inf, np.inf, -0.0, 2.0, np.inf]])
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(top_k(scores, 5), expected)


def test_top_k_chunking_is_seamless(monkeypatch: pytest.MonkeyPatch) -> None:
    import basketgnn.metrics as metrics_module

    rng = np.random.default_rng(9)
    scores = rng.integers(0, 3, size=(103, 40)).astype(np.float64)
    # Chunks of 2 rows (80 elements / 40 items) with an uneven last chunk.
    monkeypatch.setattr(metrics_module, "_TOP_K_CHUNK_ELEMENTS", 80)
    np.testing.assert_array_equal(
        top_k(scores, 10), np.argsort(-scores, axis=1, kind="stable")[:, :10]
    )


@pytest.mark.parametrize(
    ("scores", "k", "match"),
    [
        (np.zeros((2, 5)), 0, "k must be in"),
        (np.zeros((2, 5)), 6, "k must be in"),
        (np.zeros(5), 1, "2-D"),
        (np.array([[0.0, np.nan]]), 1, "NaN"),
    ],
)
def test_top_k_invalid(scores: np.ndarray, k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        top_k(scores, k)


def test_metrics_table_layout() -> None:
    metrics = {"recall@10": 0.5, "ndcg@10": 0.25, "phr@10": 1.0, "repeat_recall@10": math.nan}
    table = metrics_table(metrics, ks=(10, 20))
    assert table[0] == ["metric", "@10", "@20"]
    assert table[1] == ["recall", "0.5000", "-"]
    assert table[2] == ["ndcg", "0.2500", "-"]
    assert table[3] == ["phr", "1.0000", "-"]
    assert table[4] == ["repeat_recall", "nan", "-"]
    assert len(table) == 5


def test_top_k_orders_ties_inside_the_cut_by_index() -> None:
    # Ties among the kept items but none at the cut-off: torch's set is kept, its order fixed.
    rng = np.random.default_rng(0)
    scores = rng.permutation(np.arange(60, dtype=np.float32)).reshape(3, 20)
    scores[:, [17, 3, 11]] = 100.0  # three equal best scores, in scrambled columns
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(top_k(scores, 5), expected)
    assert (expected[:, :3] == [3, 11, 17]).all()
