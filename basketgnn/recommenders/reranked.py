"""A trained model and TIFU-KNN combined by the re-ranking stage (:mod:`basketgnn.scoring.rerank`) instead of the linear fusion, where validation chose it.

:class:`RerankedRecommender` wraps what training ships (the model, or the model fused with
TIFU-KNN, :mod:`basketgnn.recommenders.fused`) and replaces its ranking: ``rank`` takes
TIFU-KNN's top ``candidates`` of each customer, reads the trained model's scores of them and
returns the stage's order. Its state is its own checkpoint section (:data:`SECTION`), beside
the model's and the fusion's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.threads import in_parts, torch_threads
from basketgnn.recommenders.base import rank_items
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.scoring.candidates import SharedScores
from basketgnn.scoring.fusion_choice import criterion_ks
from basketgnn.scoring.item_pairs import TOP
from basketgnn.scoring.rerank import Logits, RerankStage, fit_stage
from basketgnn.scoring.rerank_features_kernel import shared_values_at
from basketgnn.scoring.tifu import TifuParams

#: The checkpoint section holding the stage's choice and state.
SECTION = "rerank"
#: Customers whose model scores are read at a time (memory: chunk x I for a dense model).
CHUNK = 1024
#: Customers a thread ranks at a time on several threads, at most and at least (:func:`part_sizes`).
PART, LAST_PART = 1024, 128


def part_sizes(n: int, threads: int) -> list[int]:
    """Sizes of consecutive parts of n customers that ``threads`` threads take in turn: each
    what is left over the number of threads, at most :data:`PART` and at least the smaller of
    :data:`LAST_PART` and n over the threads (the last part: what remains). Few parts (each has
    a fixed cost: its graphs, its search's set-up, its batches), shrinking to the end, so the
    threads end close together. Non-increasing; sums to n."""
    t = max(threads, 1)
    floor = min(LAST_PART, -(-n // t))
    sizes = []
    left = n
    while left > 0:
        size = min(left, PART, max(floor, -(-left // t)))
        sizes.append(size)
        left -= size
    return sizes


class RerankedRecommender:
    """The stage's order of TIFU-KNN's candidates, with ``shipped``'s trained model's scores
    among their features (module docstring)."""

    def __init__(self, shipped: Any, stage: RerankStage) -> None:
        self.shipped = shipped
        self.model: NeuralRecommender = getattr(shipped, "base", shipped)
        self.stage = stage
        self.name = shipped.name

    @property
    def item_ids(self) -> Any:
        return self.shipped.item_ids

    @property
    def checkpoint(self) -> dict[str, Any]:
        return self.shipped.checkpoint

    def with_threads(self, threads: int | None) -> RerankedRecommender:
        self.shipped.with_threads(threads)
        return self

    def rank(self, data: BasketData, instances: Instances, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each instance's top k of the stage's order; beyond its ``candidates``, the shipped
        ranking's next items that are not candidates, scored below them in that order. On
        several threads the work is shared by the threads (:meth:`_rank_on_threads`; the same
        rows either way).

        Shapes: -> (items [n, k] int64, scores [n, k] float32)."""
        k = min(int(k), data.n_items)
        threads = self.model.threads
        if threads <= 1 or not self.model.has_shared_scores or len(instances) == 0:
            items, scores = self.stage.order(data, instances, model_logits(self.model, data), k)
        else:
            items, scores = self._rank_on_threads(data, instances, threads, k)
        if k <= items.shape[1]:
            return items[:, :k], scores[:, :k]
        return beyond_candidates(items, scores, self.shipped.rank(data, instances, k)[0], data.n_items, k)

    def _rank_on_threads(
        self, data: BasketData, instances: Instances, threads: int, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`RerankStage.order` (its first ``k``) on ``threads`` threads: the instances in
        parts (:func:`part_sizes`) that every thread takes in turn (one torch thread each),
        each part whole on its thread: the stage's preparation (TIFU-KNN's search, the
        candidates, their features), the model's forward at those candidates alone
        (``shared_scores`` with ``wanted``: the attention of the history items that are not
        candidates is skipped), the order. No part waits on another, so the threads stay busy
        to the last part. Every customer's row is computed from its own inputs alone, so the rows
        are the one-thread ones. A configuration without the shared form (its forward gives
        none) keeps each part's preparation, and the model's dense scores of every candidate
        order them on this thread, as :meth:`RerankStage.order` does.
        Shapes: -> ([n, min(k, C)] int64, [n, min(k, C)] float32)."""
        self.model.setup(threads=False)
        bounds = np.cumsum([0] + part_sizes(len(instances), threads))
        parts = [Instances(instances.users[a:b], instances.n_history[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

        def order(part: Instances) -> tuple[np.ndarray, np.ndarray, bool]:
            """(items, scores, True) in the stage's order, or (items, features, False) where
            the configuration has no shared form."""
            items, features = self.stage.prepare(data, part)
            shared = self.model.shared_scores(data, part, 1, items)
            if shared is None:
                return items, features, False
            return *self.stage.order_prepared(items, features, shared_values(shared, items), k), True

        with torch_threads(1):
            done = in_parts(order, parts, threads)
        if all(d[2] for d in done):
            return np.concatenate([d[0] for d in done]), np.concatenate([d[1] for d in done])
        if any(d[2] for d in done):  # a configuration has the shared form for every part or for none
            raise RuntimeError("the model's scores came in shared form for some parts only")
        items = np.concatenate([d[0] for d in done])
        features = np.concatenate([d[1] for d in done])
        return self.stage.order_prepared(items, features, model_logits(self.model, data)(instances, items), k)

    def params(self) -> dict[str, Any]:
        p = dict(self.shipped.params())
        p["rerank_candidates"] = self.stage.candidates
        return p

    def state(self) -> dict[str, Any]:
        return self.stage.state()


def beyond_candidates(
    items: np.ndarray, scores: np.ndarray, shipped: np.ndarray, n_items: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates in their order, then the first k − C of each row of ``shipped`` that are
    not candidates, scored one below the last candidate, two below, ….

    Shapes: items, scores [n, C]; shipped [n, k] -> ([n, k] int64, [n, k] float32)."""
    n, c = items.shape
    rows = np.arange(n, dtype=np.int64)[:, None]
    is_candidate = np.isin(rows * n_items + shipped, (rows * n_items + items).reshape(-1))  # [n, k]
    # Each row of shipped holds at least k − C non-candidates: k distinct items, C candidates.
    order = np.argsort(is_candidate, axis=1, kind="stable")[:, : k - c]  # the non-candidates, in order
    rest = np.take_along_axis(shipped, order, axis=1)
    low = scores[:, -1:] - np.arange(1, k - c + 1, dtype=np.float32)  # [n, k - C]
    return np.concatenate([items, rest], axis=1).astype(np.int64), np.concatenate([scores, low], axis=1).astype(np.float32)


def shared_values(shared: SharedScores, items: np.ndarray) -> np.ndarray:
    """The scores in shared form at given items: each row's own entry where it has one, else the
    shared row's (:func:`~basketgnn.scoring.rerank_features_kernel.shared_values_at`).
    Shapes: items [n, C] -> [n, C] float32."""
    return shared_values_at(
        np.asarray(shared.offsets, np.int64), np.asarray(shared.items, np.int64),
        np.asarray(shared.values, np.float32), np.asarray(shared.base, np.float32),
        np.ascontiguousarray(items, dtype=np.int64),
    )  # fmt: skip


def model_logits(model: NeuralRecommender, data: BasketData) -> Logits:
    """The trained model's scores of given items: read off its shared form where it has one
    (one row for everyone plus each customer's own items), else off its dense scores,
    :data:`CHUNK` customers at a time. Shapes: items [n, C] -> [n, C] float32."""

    def read(instances: Instances, items: np.ndarray) -> np.ndarray:
        out = np.empty(items.shape, np.float32)
        model.setup()
        for start in range(0, len(instances), CHUNK):
            sl = slice(start, start + CHUNK)
            part = Instances(instances.users[sl], instances.n_history[sl])
            shared = model.shared_scores(data, part, model.threads, items[sl]) if model.has_shared_scores else None
            if shared is None:
                out[sl] = np.take_along_axis(model.score(data, part), items[sl], axis=1)
            else:
                out[sl] = shared_values(shared, items[sl])
        return out

    return read


def learn(
    shipped: Any, data: BasketData, train: Instances, validate: Instances, tifu: TifuParams, *,
    seed: int = 0, criterion: str = "mean", pairs: int = TOP, choose_pairs: bool = True,
) -> tuple[RerankStage, dict[str, Any]]:  # fmt: skip
    """The stage learned with ``shipped``'s trained model's scores (TIFU-KNN's candidates and
    parts from ``tifu``'s parameters and ``train``'s pool, ``pairs`` item pairs kept per item,
    left out where validation does not prefer them unless ``choose_pairs`` is False:
    :func:`~basketgnn.scoring.rerank.fit_stage`), and its choice record against ``shipped``'s
    own ranking of the validation customers (``kept``: validation keeps it)."""
    model = getattr(shipped, "base", shipped)
    ranked, _ = rank_items(shipped, data, validate, max(criterion_ks(data.n_items)))
    return fit_stage(
        model_logits(model, data), data, train, validate, tifu, ranked, seed=seed, criterion=criterion, pairs=pairs,
        threads=model.threads, choose_pairs=choose_pairs,
    )


def choose(
    shipped: Any, data: BasketData, train: Instances, validate: Instances, tifu: TifuParams, *,
    seed: int = 0, criterion: str = "mean", pairs: int = TOP,
) -> tuple[RerankedRecommender | None, dict[str, Any]]:  # fmt: skip
    """:func:`learn`, and the wrapper when validation keeps the stage (else None)."""
    stage, record = learn(shipped, data, train, validate, tifu, seed=seed, criterion=criterion, pairs=pairs)
    return (RerankedRecommender(shipped, stage) if record["kept"] else None), record


def from_section(shipped: Any, section: dict[str, Any] | None) -> Any:
    """``shipped`` wrapped by the stage a checkpoint section stored (``shipped`` itself when
    the section holds none: validation did not keep it). The section: ``{"choice": the record,
    "state": RerankStage.state() or None}``."""
    if not section or section.get("state") is None:
        return shipped
    return RerankedRecommender(shipped, RerankStage.from_state(section["state"]))
