"""The evaluation harness: one function scores any recommender on any split part the same way.

Scores are computed in chunks of instances so memory stays bounded (chunk x n_items floats),
reduced to the top ``max(ks)`` items, and compared with the targets by :mod:`basketgnn.metrics`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances, Split
from basketgnn.metrics import KS, ranking_metrics, top_k, usable_ks
from basketgnn.recommenders.base import Recommender


def rank_items(
    model: Recommender, data: BasketData, instances: Instances, k: int, chunk: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k item indices and their scores for every instance's history.

    A recommender with its own ``rank(data, instances, k)`` (the neural models: the same
    result from a few candidates per instance) ranks; any other is ranked from ``score``.

    Shapes: -> (items [n, k] int64, scores [n, k] float32).
    """
    k = min(k, data.n_items)
    items = np.zeros((len(instances), k), dtype=np.int64)
    scores = np.zeros((len(instances), k), dtype=np.float32)
    rank = getattr(model, "rank", None)
    for start in range(0, len(instances), chunk):
        sl = slice(start, start + chunk)
        part = Instances(instances.users[sl], instances.n_history[sl])
        if callable(rank):
            items[sl], scores[sl] = rank(data, part, k)
            continue
        s = model.score(data, part)
        idx = top_k(s, k)
        items[sl] = idx
        scores[sl] = np.take_along_axis(s, idx, axis=1)
    return items, scores


def evaluate_model(
    model: Recommender,
    data: BasketData,
    instances: Instances,
    ks: tuple[int, ...] = KS,
) -> tuple[dict[str, float], float]:
    """Metrics of ``model`` on ``instances`` (see :func:`basketgnn.metrics.ranking_metrics`).

    Returns (metrics, seconds spent scoring and ranking).
    """
    ks = usable_ks(ks, data.n_items)
    t0 = time.perf_counter()
    topk, _ = rank_items(model, data, instances, max(ks))
    seconds = time.perf_counter() - t0
    targets = data.targets(instances.users, instances.n_history)
    hist = data.histories(instances.users, instances.n_history).items_per_instance()
    metrics = ranking_metrics(
        topk, targets.values, targets.offsets, data.n_items, hist.values, hist.offsets, ks
    )
    return metrics, seconds


def fit_and_evaluate(
    model: Recommender,
    data: BasketData,
    split: Split,
    part: str = "test",
    ks: tuple[int, ...] = KS,
    *,
    fit: bool = True,
) -> tuple[dict[str, float], dict[str, float]]:
    """Fit ``model`` on the split's training part (its validation part choosing epochs or
    tuning), then :func:`evaluate_model` on ``split[part]``.

    With ``fit=False`` the model is trained already (a checkpoint) and only evaluated.
    An unknown ``part`` is a :class:`UserError` raised before fitting.

    Returns (metrics, timing ``{"fit": seconds, "score": seconds}``), as
    :func:`result_record` takes them.
    """
    instances = split[part]
    t0 = time.perf_counter()
    if fit:
        model.fit(data, split["train"], split["validate"])
    fit_s = time.perf_counter() - t0
    metrics, score_s = evaluate_model(model, data, instances, ks)
    return metrics, {"fit": fit_s, "score": score_s}


def result_record(
    model: Recommender,
    data_path: str,
    split: Split,
    part: str,
    metrics: dict[str, float],
    timing: dict[str, float],
    n_instances: int,
) -> dict[str, Any]:
    """One machine-readable result row (written by ``evaluate --output`` and the pipelines)."""
    return {
        "model": model.name,
        "params": model.params(),
        "data": data_path,
        "split": split.name,
        "part": part,
        "n_users": n_instances,
        "metrics": {k: (None if np.isnan(v) else round(float(v), 6)) for k, v in metrics.items()},
        "timing_s": {k: round(v, 3) for k, v in timing.items()},
    }
