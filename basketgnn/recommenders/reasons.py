"""Why each recommended item is there, in words and numbers a category manager can read.

The reasons come from what produced the item's score. A trained model's recommender ranks
customer u's item i by its logit s_{u,i}; fused with TIFU-KNN and the item transitions
(:mod:`basketgnn.recommenders.fused`) by

    f_{u,i} = (1 − λ) · sigmoid(s_{u,i}) + λ · q_{u,i} + ν · t_{u,i}

and TIFU-KNN's kept, scaled score q splits into the customer's own decayed purchases and the
mean of its k nearest customers: q = (α · own + (1 − α) · mean) / max_j(α · own_j + (1 − α) · mean_j).
Each item gets, as far as its recommender has them:

- ``score``: f and its parts: the model, the customer's own history, the similar customers and
  the item transitions (they add up to the score);
- ``repeat``: the customer's own evidence: bought in n of the last m baskets, how often in the
  whole history, last time t baskets back (or never bought);
- ``neighbours``: the share of the k most similar customers (TIFU-KNN's neighbours) who bought
  it;
- ``transitions``: the items of the customer's history that lead to it, with their shares of
  its transition score;
- ``attention``: for a model that declares ``ModelSpec.attention`` (DNNTSP), the past baskets
  its temporal attention weighs most for this item;
- ``bought_with``: for a re-ranking stage that reads item pairs
  (:mod:`~basketgnn.scoring.item_pairs`), the customer's items whose buyers buy it most
  (largest pair cosine first), with the share of their buyers who do.

Every reason is a dict ``{"kind", "text", ...numbers}``. Reasons are computed ``chunk``
customers at a time and never change the ranking: they read the same scorers again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from basketgnn.data.dataset import BasketData, Histories, ranges
from basketgnn.data.split import Instances
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.recommenders.reranked import RerankedRecommender
from basketgnn.scoring.candidates import sigmoid
from basketgnn.scoring.fusion import ScoreFusion

#: The last baskets the repeat evidence counts in ("bought in n of the last m").
REPEAT_WINDOW = 10
#: Transition sources and attention baskets named per item.
TOP_SOURCES = 3
#: Customers explained together (memory: chunk x I float64 for the scores).
CHUNK = 256

Reason = dict[str, Any]


def _rerank_reason(pairs: bool) -> Reason:
    """The first reason of every item a re-ranked recommender ranks; ``pairs``: its stage reads
    the item pairs (validation kept them)."""
    text = "ordered by the re-ranking stage, from the parts below, when and how regularly the customer bought the item"
    if pairs:
        text += ", and what other customers buy with the customer's items"
    return {"kind": "rerank", "text": text}


def explain(
    rec: Any, data: BasketData, instances: Instances, items: np.ndarray, chunk: int = CHUNK
) -> list[list[list[Reason]]]:
    """The reasons of each instance's ranked items.

    Shapes: items [n, k] catalogue indices -> n lists of k lists of reasons.
    """
    out: list[list[list[Reason]]] = []
    for start in range(0, len(instances), chunk):
        sl = slice(start, start + chunk)
        part = Instances(np.asarray(instances.users[sl]), np.asarray(instances.n_history[sl]))
        out.extend(_explain_chunk(rec, data, part, np.asarray(items[sl], np.int64)))
    return out


def _explain_chunk(rec: Any, data: BasketData, inst: Instances, items: np.ndarray) -> list[list[list[Reason]]]:
    n, k = items.shape
    # A re-ranked recommender's items are explained by what the shipped ranking reads of them
    # (the model, TIFU-KNN's parts, the transitions, the repeats), after a reason saying that
    # the stage set their order: it reads the same and the customer's repeat timing.
    reranked = isinstance(rec, RerankedRecommender)
    pairs = rec.stage.pairs if reranked else None
    rec = rec.shipped if reranked else rec
    fusion = rec.fusion if isinstance(rec, FusedRecommender) else None
    base = rec.base if isinstance(rec, FusedRecommender) else rec
    hist = data.histories(inst.users, inst.n_history)
    parts: dict[str, np.ndarray] = {}
    share = n_nbrs = sources = None
    logits, attention = _model(base, data, inst, hist, items) if isinstance(base, NeuralRecommender) else (None, None)
    if logits is not None and (fusion is None or fusion.weight < 1):
        parts["model"] = logits if fusion is None else (1.0 - fusion.weight) * sigmoid(logits)
    if fusion is not None:
        parts["own_history"], parts["similar_customers"], share, n_nbrs = _tifu_parts(fusion, data, inst, items)
        if fusion.uses_transitions:
            parts["item_transitions"], sources = _transition_parts(fusion, data, inst, hist, items)
    evidence = [e.tolist() for e in _repeat_evidence(hist, items, data.n_items)]
    bought_with = pairs.strongest(data, inst, hist, items, TOP_SOURCES) if pairs is not None else None

    # Python lists: per-entry reads of numpy arrays cost more than the rest of a reason.
    names, values = list(parts), [v.tolist() for v in parts.values()]
    share_l = share.tolist() if share is not None else None
    count = n_nbrs.tolist() if n_nbrs is not None else None
    history = inst.n_history.tolist()
    reasons: list[list[list[Reason]]] = []
    for r in range(n):
        row = []
        window = min(REPEAT_WINDOW, int(history[r]))
        for j in range(k):
            out = [
                _score_reason(dict(zip(names, (v[r][j] for v in values))), fusion is None, reranked),
                _repeat_reason(evidence[0][r][j], evidence[1][r][j], evidence[2][r][j], window),
            ]
            if reranked:
                out.insert(0, _rerank_reason(pairs is not None))
            if count is not None and count[r] > 0:
                out.append(_neighbour_reason(share_l[r][j], count[r]))  # type: ignore[index]
            if sources is not None and sources[r][j]:
                out.append(_transition_reason(sources[r][j], data.item_ids))
            if attention is not None and attention[r][j]:
                out.append(_attention_reason(attention[r][j]))
            if bought_with is not None and bought_with[r][j]:
                out.append(_bought_with_reason(bought_with[r][j], data.item_ids))
            row.append(out)
        reasons.append(row)
    return reasons


def _tifu_parts(
    fusion: ScoreFusion, data: BasketData, inst: Instances, items: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """λ · q of each item split into the own-history and the neighbour parts, the share of the
    customer's neighbours who bought it, and how many neighbours the customer has.

    Shapes: items [n, k] -> ([n, k], [n, k], [n, k], [n])."""
    scorer = fusion.scorer
    assert scorer is not None
    p = scorer.params
    kept = scorer.scores(data, inst)[p.alpha]  # the q the fusion adds
    q = _sparse_at(kept.offsets, kept.items, kept.values, items)  # [n, k]
    own_rows, neighbours = scorer.neighbours(data, inst)
    own = np.take_along_axis(own_rows.dense(np.arange(own_rows.n_rows)), items, axis=1)  # [n, k]
    mean = np.take_along_axis(scorer.neighbour_mean(neighbours), items, axis=1)  # [n, k]
    x = p.alpha * own + (1.0 - p.alpha) * mean
    tifu = fusion.weight * q
    own_part = np.where(x > 0, tifu * p.alpha * own / np.where(x > 0, x, 1.0), 0.0)
    share = np.take_along_axis(scorer.neighbour_share(neighbours), items, axis=1)
    return own_part, tifu - own_part, share, (neighbours >= 0).sum(axis=1)


def _transition_parts(
    fusion: ScoreFusion, data: BasketData, inst: Instances, hist: Histories, items: np.ndarray
) -> tuple[np.ndarray, list[list[list[tuple[int, float]]]]]:
    """ν · t of each item and, per item j, the history items i leading to it with their shares
    of Σ_i h_i S_ij (``scoring.transitions``: h = Σ_t decay^(T − t) x_t), largest first.

    Shapes: items [n, k] -> ([n, k], n lists of k lists of (item, share))."""
    scorer, option = fusion.transitions, fusion.transition_option
    assert scorer is not None and option is not None
    t = scorer.scores(data, inst, option)
    part = fusion.transition_weight * _sparse_at(t.offsets, t.items, t.values, items)
    n, k = items.shape
    n_items = data.n_items
    # h as sorted keys (row · I + item) -> weight.
    n_baskets = np.diff(hist.basket_offsets)
    owner = np.repeat(np.arange(n), n_baskets)
    age = hist.basket_offsets[owner + 1] - 1 - np.arange(len(owner))
    sizes = hist.baskets.lengths
    keys, inverse = np.unique(np.repeat(owner, sizes) * n_items + hist.baskets.values.astype(np.int64), return_inverse=True)
    h = np.bincount(inverse, weights=np.repeat(float(option.decay) ** age, sizes), minlength=len(keys))
    # Every (pair, source) entry of column j of S: S's transpose lists each column's sources.
    st = scorer.matrix.T.tocsr()
    st.sort_indices()
    pair_item = items.ravel()
    pair_row = np.repeat(np.arange(n), k)
    lengths = np.diff(st.indptr)[pair_item]
    entry = ranges(st.indptr[pair_item], lengths)
    pair = np.repeat(np.arange(n * k), lengths)
    source, s_value = st.indices[entry].astype(np.int64), st.data[entry]
    key = pair_row[pair] * n_items + source
    pos = np.minimum(np.searchsorted(keys, key), max(len(keys) - 1, 0))
    held = (keys[pos] == key) if len(keys) else np.zeros(len(key), bool)
    contrib = np.where(held, h[pos] if len(keys) else 0.0, 0.0) * s_value
    keep = contrib > 0
    pair, source, contrib = pair[keep], source[keep], contrib[keep]
    total = np.bincount(pair, weights=contrib, minlength=n * k)
    order = np.lexsort((source, -contrib, pair))  # per pair: largest first, ties to the lower item
    pair, source, contrib = pair[order], source[order], contrib[order]
    first = np.searchsorted(pair, pair, side="left")
    top = np.flatnonzero(np.arange(len(pair)) - first < TOP_SOURCES)
    sources: list[list[list[tuple[int, float]]]] = [[[] for _ in range(k)] for _ in range(n)]
    if option.explore_only:  # the customer's own items get no transition score
        bought = np.isin(pair_row * n_items + pair_item, keys).reshape(n, k)
    for p_, i_, c_ in zip(pair[top].tolist(), source[top].tolist(), (contrib[top] / total[pair[top]]).tolist()):
        r, j = divmod(p_, k)
        if not (option.explore_only and bought[r, j]):
            sources[r][j].append((i_, c_))
    return part, sources


def _repeat_evidence(hist: Histories, items: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (instance, item): baskets holding it in the last :data:`REPEAT_WINDOW`, in the whole
    history, and how many baskets back it was last bought (-1: never).

    Shapes: items [n, k] -> three [n, k] int64."""
    n_baskets = np.diff(hist.basket_offsets)
    owner = np.repeat(np.arange(len(n_baskets)), n_baskets)  # [B]
    age = hist.basket_offsets[owner + 1] - 1 - np.arange(len(owner))  # [B] 0 = last basket
    sizes = hist.baskets.lengths
    key = np.repeat(owner, sizes) * n_items + hist.baskets.values.astype(np.int64)  # [entries]
    entry_age = np.repeat(age, sizes)
    order = np.lexsort((entry_age, key))
    key, entry_age = key[order], entry_age[order]
    distinct, first, count = np.unique(key, return_index=True, return_counts=True)
    shape = items.shape
    if len(distinct) == 0:
        return np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.full(shape, -1, np.int64)
    recent = np.add.reduceat((entry_age < REPEAT_WINDOW).astype(np.int64), first)
    query = (np.arange(len(items))[:, None] * n_items + items).ravel()
    pos = np.minimum(np.searchsorted(distinct, query), len(distinct) - 1)
    found = distinct[pos] == query
    return (
        np.where(found, recent[pos], 0).reshape(shape),
        np.where(found, count[pos], 0).reshape(shape),
        np.where(found, entry_age[first][pos], -1).reshape(shape),
    )


def _model(
    base: NeuralRecommender, data: BasketData, inst: Instances, hist: Histories, items: np.ndarray
) -> tuple[np.ndarray | None, list[list[list[tuple[int, float, bool]]]] | None]:
    """One forward of the chunk: the model's logits of the items [n, k] and, for a model that
    declares ``ModelSpec.attention``, per (instance, item) the window's baskets its attention
    weighs most, most first, as (baskets back, share, whether the basket holds the item)."""
    if base.model is None:
        return None, None
    base.setup()
    source = base.spec.batches(data, inst, base.config, False)
    base.model.eval()
    batch = source.collate(np.arange(len(inst)), with_targets=False).to(torch.device(base.config.device))
    with torch.inference_mode():
        logits = np.take_along_axis(base.model(batch).double().cpu().numpy(), items, axis=1)  # [n, k]
    if base.spec.attention is None:
        return logits, None
    rows = torch.as_tensor(np.repeat(np.arange(len(items)), items.shape[1]))
    weights = base.spec.attention(base.model, batch, rows, torch.as_tensor(items.ravel()))
    if weights is None:
        return logits, None
    row, item = weights.row.cpu().numpy(), weights.item.cpu().numpy()
    length, w = weights.length.cpu().numpy(), weights.weight.float().cpu().numpy()
    where = {(int(r), int(i)): m for m, (r, i) in enumerate(zip(row, item))}
    out: list[list[list[tuple[int, float, bool]]]] = []
    for r in range(len(items)):
        first, last = hist.basket_offsets[r], hist.basket_offsets[r + 1]
        held_by: dict[int, set[int]] = {}  # baskets back -> its items, read when asked
        per_item = []
        for i in items[r].tolist():
            m = where.get((r, i))
            if m is None:
                per_item.append([])
                continue
            top = np.argsort(-w[m, : length[m]], kind="stable")[:TOP_SOURCES]
            backs = [int(length[m] - 1 - t) for t in top]
            for b in backs:
                if b not in held_by:
                    held_by[b] = set(hist.baskets.row(last - 1 - b).tolist()) if last - 1 - b >= first else set()
            held = [i in held_by[b] for b in backs]
            per_item.append([(b, float(w[m, t]), h) for b, t, h in zip(backs, top, held)])
        out.append(per_item)
    return logits, out


def _sparse_at(offsets: np.ndarray, cols: np.ndarray, values: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Entries (r, items[r, j]) of CSR rows (0 where absent). Shapes: items [n, k] -> [n, k]."""
    out = np.zeros(items.shape, np.float64)
    for r in range(len(items)):
        lo, hi = int(offsets[r]), int(offsets[r + 1])
        row = dict(zip(cols[lo:hi].tolist(), values[lo:hi].tolist()))
        out[r] = [row.get(i, 0.0) for i in items[r].tolist()]
    return out


def _back(age: int) -> str:
    return "the last basket" if age == 0 else f"{age} basket{'s' if age > 1 else ''} back"


def _score_reason(parts: dict[str, float], alone: bool, reranked: bool = False) -> Reason:
    total = sum(parts.values())
    if alone:
        return {"kind": "score", "text": f"the model's score {total:.4f}", "score": total, "parts": parts}
    shown = " + ".join(f"{name.replace('_', ' ')} {value:.4f}" for name, value in parts.items())
    label = "fused score" if reranked else "score"
    return {"kind": "score", "text": f"{label} {total:.4f} = {shown}", "score": total, "parts": parts}


def _repeat_reason(recent: int, times: int, last: int, window: int) -> Reason:
    if times == 0:
        return {"kind": "repeat", "text": "never bought by this customer: a new item for them",
                "recent_baskets": 0, "window": window, "baskets": 0, "last_bought": None}  # fmt: skip
    return {
        "kind": "repeat",
        "text": f"bought in {recent} of the last {window} baskets ({times} in all); last bought {'in ' if last == 0 else ''}{_back(last)}",
        "recent_baskets": recent, "window": window, "baskets": times, "last_bought": last,
    }  # fmt: skip


def _neighbour_reason(share: float, k: int) -> Reason:
    return {"kind": "neighbours", "text": f"bought by {share:.0%} of the {k} most similar customers",
            "share": share, "neighbours": k}  # fmt: skip


def _transition_reason(sources: list[tuple[int, float]], item_ids: np.ndarray) -> Reason:
    named = [(str(item_ids[i]), share) for i, share in sources]
    listed = ", ".join(f"{name} ({share:.0%})" for name, share in named)
    return {"kind": "transitions", "text": f"customers buy it in the basket after {listed}",
            "from": [{"item_id": name, "share": share} for name, share in named]}  # fmt: skip


def _attention_reason(baskets: list[tuple[int, float, bool]]) -> Reason:
    listed = "; ".join(
        f"{_back(age)} ({share:.0%}, item {'bought' if held else 'not bought'} then)" for age, share, held in baskets
    )
    return {"kind": "attention", "text": f"the model's attention for it rests most on {listed}",
            "baskets": [{"baskets_back": age, "share": share, "held_item": held} for age, share, held in baskets]}  # fmt: skip


def _bought_with_reason(sources: list[tuple[int, float, float]], item_ids: np.ndarray) -> Reason:
    named = [(str(item_ids[i]), cos, share) for i, cos, share in sources]
    listed = ", ".join(f"{name} ({share:.0%} of its buyers)" for name, _, share in named)
    return {"kind": "bought_with", "text": f"bought by other customers with this customer's items: {listed}",
            "with": [{"item_id": name, "cosine": cos, "share": share} for name, cos, share in named]}  # fmt: skip
