"""The evaluation harness: one function scores any recommender on any split part the same way.

Scores are computed in chunks of instances so memory stays bounded (chunk x n_items floats),
reduced to the top ``max(ks)`` items, and compared with the targets by :mod:`basketgnn.metrics`.
"""

from __future__ import annotations

import time

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances, Split
from basketgnn.metrics import KS, ranking_metrics, usable_ks
from basketgnn.recommenders.base import Recommender, rank_items


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

    Returns (metrics, timing ``{"fit": seconds, "score": seconds}``). For a recommender object
    built outside the registry (benchmarks); a model by name trains through
    :func:`basketgnn.workflow.training.train`, which also chooses a neural model's fusion.
    """
    instances = split[part]
    t0 = time.perf_counter()
    if fit:
        model.fit(data, split["train"], split["validate"])
    fit_s = time.perf_counter() - t0
    metrics, score_s = evaluate_model(model, data, instances, ks)
    return metrics, {"fit": fit_s, "score": score_s}
