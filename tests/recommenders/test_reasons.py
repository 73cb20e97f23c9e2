"""The reasons given with each recommended item (basketgnn/recommenders/reasons.py), against
dense references written out loop by loop: the score's parts add up to the served score and
equal (1 − λ)·sigmoid(logit), λ·q split by TIFU-KNN's own and neighbour terms and ν·t; the
neighbours' share, the repeat evidence, the transitions' sources and DNNTSP's attention per
basket equal what a brute-force computation gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.split import Instances, make_split
from basketgnn.recommenders.base import rank_items
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.recommenders.reasons import REPEAT_WINDOW, explain
from basketgnn.scoring.fusion import ScoreFusion, TifuScorer
from basketgnn.scoring.tifu import TifuParams
from basketgnn.scoring.transitions import TransitionOption, TransitionScorer
from tests.recommenders.test_fused import recommender
from tests.support.planted import planted_data

K = 6


@pytest.fixture(scope="module")
def setting():
    from basketgnn.models.dnntsp import DNNTSPConfig

    data = planted_data(n_users=80, n_items=30)
    train = make_split(data, "temporal")["train"]
    base = recommender(data, DNNTSPConfig(embed_dim=8, threads=1, max_history=6))
    params = TifuParams(k=7, m=2, r_b=0.9, r_g=0.7, alpha=0.3)
    option = TransitionOption(0.5, False)
    fusion = ScoreFusion(0.4, "sigmoid", TifuScorer.build(data, train, params), transitions=TransitionScorer.build(data, train),
                         transition_weight=0.2, transition_option=option)  # fmt: skip
    rec = FusedRecommender(base, fusion)
    inst = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    items, scores = rank_items(rec, data, inst, K)
    return data, train, rec, inst, items, scores, explain(rec, data, inst, items, chunk=32)


def by_kind(reasons, kind):
    found = [r for r in reasons if r["kind"] == kind]
    return found[0] if found else None


def baskets_of(data, u):
    return [set(b.tolist()) for b in data.user_baskets(u)]


def test_the_parts_add_up_to_the_served_score(setting):
    _, _, _, _, items, scores, why = setting
    total = np.array([[by_kind(r, "score")["score"] for r in row] for row in why])
    np.testing.assert_allclose(total, scores, rtol=2e-6, atol=1e-7)
    for row in why:
        for r in row:
            parts = by_kind(r, "score")["parts"]
            assert set(parts) == {"model", "own_history", "similar_customers", "item_transitions"}
            assert np.isclose(sum(parts.values()), by_kind(r, "score")["score"])


def test_the_parts_equal_a_dense_reference(setting):
    data, train, rec, inst, items, _, why = setting
    fusion, p = rec.fusion, rec.fusion.scorer.params
    logits = rec.base.score(data, inst).astype(np.float64)
    pool = [u for u in train.users]  # the TIFU pool: each training instance, history + target
    pool_vec = np.array([tifu_vector(data.user_baskets(u)[: h + 1], data.n_items, p) for u, h in zip(train.users, train.n_history)])
    S = fusion.transitions.matrix.toarray()
    for u in range(data.n_users):
        own = tifu_vector(data.user_baskets(u), data.n_items, p)
        dist = ((pool_vec - own) ** 2).sum(axis=1)
        dist[[i for i, v in enumerate(pool) if data.user_ids[v] == data.user_ids[u]]] = np.inf
        nbrs = [i for i in np.argsort(dist, kind="stable")[: p.k] if np.isfinite(dist[i])]
        mean = pool_vec[nbrs].mean(axis=0)
        x = p.alpha * own + (1 - p.alpha) * mean
        h = np.zeros(data.n_items)
        for age, basket in enumerate(reversed(data.user_baskets(u))):
            h[basket] += 0.5**age
        t = h @ S
        for j, i in enumerate(items[u]):
            parts = by_kind(why[u][j], "score")["parts"]
            assert np.isclose(parts["model"], (1 - 0.4) / (1 + np.exp(-logits[u, i])), rtol=1e-6)
            assert np.isclose(parts["own_history"], 0.4 * p.alpha * own[i] / x.max(), rtol=1e-6, atol=1e-12)
            assert np.isclose(parts["similar_customers"], 0.4 * (1 - p.alpha) * mean[i] / x.max(), rtol=1e-6, atol=1e-12)
            assert np.isclose(parts["item_transitions"], 0.2 * t[i] / t.max(), rtol=1e-5, atol=1e-9)
            share = np.mean([pool_vec[n, i] > 0 for n in nbrs])
            assert np.isclose(by_kind(why[u][j], "neighbours")["share"], share)
            sources = by_kind(why[u][j], "transitions")
            contrib = h * S[:, i]
            if contrib.sum() > 0:
                top = np.argsort(-contrib, kind="stable")[:3]
                want = [(str(data.item_ids[s]), contrib[s] / contrib.sum()) for s in top if contrib[s] > 0]
                got = [(f["item_id"], f["share"]) for f in sources["from"]]
                assert [g[0] for g in got] == [w[0] for w in want]
                np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-6)
            else:
                assert sources is None


def tifu_vector(baskets, n_items, p):
    """TIFU-KNN's customer vector, group by group (m baskets a group, the oldest group short)."""
    T = len(baskets)
    n_groups = -(-T // p.m)
    v = np.zeros(n_items)
    for back, basket in enumerate(reversed(baskets)):  # back 0: the last basket
        g, pos = divmod(back, p.m)
        size = min(p.m, T - g * p.m)
        v[sorted(set(basket.tolist()))] += p.r_g**g * p.r_b**pos / (size * n_groups)
    return v


def test_repeat_evidence_equals_counting_the_baskets(setting):
    data, _, _, _, items, _, why = setting
    for u in range(data.n_users):
        baskets = baskets_of(data, u)
        for j, i in enumerate(items[u]):
            r = by_kind(why[u][j], "repeat")
            held = [n for n, b in enumerate(baskets) if i in b]
            assert r["baskets"] == len(held)
            assert r["recent_baskets"] == sum(1 for n in held if n >= len(baskets) - REPEAT_WINDOW)
            assert r["window"] == min(REPEAT_WINDOW, len(baskets))
            assert r["last_bought"] == (None if not held else len(baskets) - 1 - held[-1])
            assert ("never bought" in r["text"]) == (not held)


def test_attention_per_basket_equals_a_dense_reference(setting):
    """The shares come from c_{h,t'} = Σ_t a_t A_{h,t,t'}; with signs, merge_h Σ_t' c V equals
    the node vector the model scores with (the decomposition is exact)."""
    data, _, rec, inst, items, _, why = setting
    module, config = rec.base.model, rec.base.config
    attention = module.attention
    batch = rec.base.spec.batches(data, inst, config, False).collate(np.arange(len(inst)), with_targets=False)
    with torch.inference_mode():
        rows = module.row_features(batch).double()
        z_model = module.node_vectors(batch).double()
        W = attention.qkv.weight.double()
        w_agg = module.aggregate.w_agg.double()
    H, dh = attention.heads, attention.d_head
    checked = 0
    node_of = {(int(b), int(i)): m for m, (b, i) in enumerate(zip(batch.node_user, batch.node_item))}
    for u in range(data.n_users):
        for j, i in enumerate(items[u]):
            m = node_of.get((u, int(i)))
            got = by_kind(why[u][j], "attention")
            if m is None:
                assert got is None  # not in the baskets the model reads
                continue
            T = int(batch.node_len[m])
            C = rows[batch.seq_row[m, :T]]  # [T, d]
            qkv = (C @ W.T).view(T, 3, H, dh)
            A = torch.zeros(H, T, T, dtype=torch.float64)
            for h in range(H):
                for t in range(T):
                    s = torch.tensor([qkv[t, 0, h] @ qkv[t2, 1, h] / dh**0.5 for t2 in range(t + 1)])
                    A[h, t, : t + 1] = torch.softmax(s, 0)
            Z = torch.cat([A[h] @ qkv[:, 2, h] for h in range(H)], dim=1)  # [T, d]
            a = Z @ w_agg  # [T]
            c = torch.stack([a @ A[h] for h in range(H)])  # [H, T]
            z = torch.cat([c[h] @ qkv[:, 2, h] for h in range(H)])
            torch.testing.assert_close(z, z_model[m], rtol=1e-4, atol=1e-5)
            share = c.abs().mean(0) / c.abs().mean(0).sum()
            top = torch.argsort(-share, stable=True)[:3]
            want = [(T - 1 - int(t), float(share[t])) for t in top]
            got_pairs = [(b["baskets_back"], b["share"]) for b in got["baskets"]]
            assert [g[0] for g in got_pairs] == [w[0] for w in want]
            np.testing.assert_allclose([g[1] for g in got_pairs], [w[1] for w in want], rtol=1e-4)
            baskets = baskets_of(data, u)
            assert [b["held_item"] for b in got["baskets"]] == [int(i) in baskets[len(baskets) - 1 - g[0]] for g in got_pairs]
            checked += 1
    assert checked > 50


def test_a_model_alone_gives_its_logit_and_no_fusion_reasons(setting):
    data, _, rec, inst, _, _, _ = setting
    base = rec.base
    items, scores = rank_items(base, data, inst, 3)
    why = explain(base, data, inst, items)
    for row, s in zip(why, scores):
        for r, value in zip(row, s):
            assert [x["kind"] for x in r][:2] == ["score", "repeat"]
            assert not {"neighbours", "transitions"} & {x["kind"] for x in r}
            assert np.isclose(by_kind(r, "score")["score"], value, rtol=1e-6)
