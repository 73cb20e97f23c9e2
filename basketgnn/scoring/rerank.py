"""The re-ranking stage: TIFU-KNN's top candidates of each customer put in order by a small network over their features (the trained model's score among them), learned on the training customers and kept only where validation prefers it to the shipped ranking.

A customer's ``candidates`` (100) best items by TIFU-KNN (at its tuned α, ties to the lower
item; rows with fewer kept items are filled with the most bought items) are scored by
:class:`~basketgnn.nn.candidate_mlp.CandidateMLP` from
:func:`~basketgnn.scoring.rerank_features.candidate_features` (the model's logit, the TIFU
rank, TIFU-KNN's parts, the customer's repeat timing, item and customer counts, and, where
validation keeps them, how strongly the pool buys each candidate with the customer's own items:
:class:`~basketgnn.scoring.item_pairs.ItemPairs`) and ranked by that score, ties to TIFU's
order. A ranking of k <= candidates items reads the candidates alone
(the wrapper continues a longer one with the shipped ranking).

The candidates come from TIFU-KNN, not from the shipped (fused) ranking: a training customer's
TIFU score never uses its own vector as a neighbour, so the training customers' candidates look
like the validation customers', while the trained model's ranking of its own training targets
does not (it has learned them).

Learning (:func:`fit_stage`): the training customers' last p targets (instance (u, h) and its
shorter histories (u, h − 1), …; at most :data:`SAMPLE` instances, a seeded sample) with the
listwise loss, for each p of :data:`PREFIX_CHOICES`; the epoch and p are chosen by the
validation customers' criterion (the fusion's: each customer's mean of recall, NDCG and PHR at
10 and 20, or at 10 alone). With item pairs, the same network without the two pair columns is
learned on the chosen p, and the pairs stay only when they beat it by more than one standard
error of the paired per-customer difference: the pair columns are the stage's costliest to
compute, and where validation cannot tell them from their absence, ranking goes without them.
(p is chosen with the pairs, so the comparison leans to them: it can keep pairs that a choice
of p for each side would drop, not the reverse.)
The stage is kept only when its criterion beats the shipped ranking's on the validation
customers by the same rule, the fusion's own. The instances' candidates and features are
prepared in parts that the threads share.

Shapes: -> candidates [n, C] in the stage's order and their scores [n, C].
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.threads import in_parts, torch_thread_count
from basketgnn.nn.candidate_mlp import CandidateMLP, listwise_loss
from basketgnn.scoring.fusion import TifuScorer
from basketgnn.scoring.fusion_choice import customer_criterion, paired_gain
from basketgnn.scoring.item_pairs import TOP, ItemPairs
from basketgnn.scoring.rerank_features import (
    FEATURES,
    PART_ALPHAS,
    ItemStats,
    candidate_features,
    feature_names,
)
from basketgnn.scoring.sparse import SparseScores
from basketgnn.scoring.tifu import TifuParams, capped_pool
from basketgnn.scoring.topk_kernel import sparse_top_k, stable_top_k

#: Candidates per customer that the stage reorders.
CANDIDATES = 100
#: Training targets per training customer: its last one and the ones before.
PREFIXES = 4
#: The numbers of training targets per customer that learning tries, chosen on validation: a
#: customer's last few baskets, or more of them for long histories.
PREFIX_CHOICES = (4, 12)
#: Training instances at most (a seeded sample of them beyond).
SAMPLE = 40_000
EPOCHS = 30
#: Epochs without a better validation criterion before learning stops.
PATIENCE = 5
BATCH = 128
LR = 3e-3
WEIGHT_DECAY = 1e-5
HIDDEN = 64
#: The features' column holding the trained model's score.
SCORE_COLUMN = FEATURES.index("score")
#: Candidate rows the network scores at a time (:meth:`RerankStage.scores`): a block's hidden
#: activations (8192 x 64 float32, 2 MiB) stay in the core's cache.
SCORE_ROWS = 8192
#: Instances prepared at a time while learning (:func:`_features`): parts the threads share.
PREPARE_ROWS = 2048

#: logits(instances, items) -> the trained model's scores of the items. Shapes: items [n, C] -> [n, C].
Logits = Callable[[Instances, np.ndarray], np.ndarray]


@dataclass
class RerankStage:
    """A learned reordering of a recommender's candidates (module docstring)."""

    scorer: TifuScorer
    item_stats: ItemStats
    net: CandidateMLP
    candidates: int = CANDIDATES
    pairs: ItemPairs | None = None

    @property
    def features(self) -> tuple[str, ...]:
        """The network's input columns, in order."""
        return feature_names(self.pairs)

    def tifu_parts(self, data: BasketData, instances: Instances) -> tuple[SparseScores, ...]:
        """TIFU-KNN's kept scores at its α, at α = 0 and at α = 1, each row scaled to its max."""
        alphas = (self.scorer.params.alpha, *PART_ALPHAS)
        found = self.scorer.scores(data, instances, sorted(set(alphas)))
        return tuple(found[a] for a in alphas)

    def candidate_items(self, data: BasketData, instances: Instances) -> tuple[np.ndarray, tuple[SparseScores, ...]]:
        """Each instance's top ``candidates`` by TIFU-KNN, best first (ties to the lower item;
        short rows filled with the most bought items not in them), and TIFU's three parts.
        Shapes: -> ([n, C] int64, parts)."""
        parts = self.tifu_parts(data, instances)
        return top_candidates(parts[0], self.candidates, self.item_stats.log_baskets), parts

    def order(
        self, data: BasketData, instances: Instances, logits: Logits, k: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The candidates by the stage's score, best first, ties to TIFU's order (the first
        ``k`` of them; default: all). Shapes: -> ([n, min(k, C)] int64, [n, min(k, C)] float32)."""
        items, features = self.prepare(data, instances)
        return self.order_prepared(items, features, logits(instances, items), k)

    def prepare(self, data: BasketData, instances: Instances) -> tuple[np.ndarray, np.ndarray]:
        """Everything :meth:`order` reads but the trained model's scores: the candidates
        (:meth:`candidate_items`) and their features with the ``score`` column at 0.
        Shapes: -> ([n, C] int64, [n, C, F] float32)."""
        items, parts = self.candidate_items(data, instances)
        zeros = np.zeros(items.shape, np.float32)
        return items, candidate_features(data, instances, items, zeros, parts, self.item_stats, self.pairs)

    def order_prepared(
        self, items: np.ndarray, features: np.ndarray, values: np.ndarray, k: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`order` from :meth:`prepare`'s output and the model's scores of the candidates
        (written into the features' ``score`` column). Fewer than C wanted: each row's first k
        by a selection that keeps the stable sort's order (:func:`stable_top_k`), not a sort of
        all C. Shapes: items, values [n, C] -> ([n, min(k, C)] int64, [n, min(k, C)] float32)."""
        width = items.shape[1] if k is None else min(int(k), items.shape[1])
        if len(items) == 0:
            return items[:, :width], np.zeros((0, width), np.float32)
        features[..., SCORE_COLUMN] = values
        s = self.scores(features)
        if width < items.shape[1]:
            order = stable_top_k(s, width)  # [n, k]
        else:
            order = np.argsort(-s, axis=1, kind="stable")  # [n, C]
        return np.take_along_axis(items, order, axis=1), np.take_along_axis(s, order, axis=1)

    def scores(self, features: np.ndarray) -> np.ndarray:
        """The network's scores, :data:`SCORE_ROWS` candidate rows at a time: each row's score
        depends on its features alone, so the blocks give the same values as one pass, and a
        block's hidden activations stay in cache. Shapes: [n, C, F] -> [n, C] float32."""
        self.net.eval()
        flat = torch.from_numpy(features.reshape(-1, features.shape[-1]))  # [n * C, F]
        out = torch.empty(len(flat), dtype=torch.float32)
        with torch.inference_mode():
            for start in range(0, len(flat), SCORE_ROWS):
                out[start : start + SCORE_ROWS] = self.net.score_rows(flat[start : start + SCORE_ROWS])
        return out.numpy().reshape(features.shape[:2])

    def state(self) -> dict[str, Any]:
        return {
            "candidates": self.candidates, "features": list(self.features), "hidden": self.net.hidden,
            "tifu": self.scorer.state(), "item_stats": asdict(self.item_stats),
            "net": {k: v.clone() for k, v in self.net.state_dict().items()},
            "pairs": None if self.pairs is None else self.pairs.state(),
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RerankStage:
        """The stage :meth:`state` stored (one stored without ``pairs`` reads no pair columns)."""
        pairs = None if state.get("pairs") is None else ItemPairs.from_state(state["pairs"])
        names = feature_names(pairs)
        if list(state["features"]) != list(names):
            raise ValueError(f"the stage was learned on the features {list(state['features'])}, this version computes {list(names)}")
        net = CandidateMLP(len(names), int(state["hidden"]))
        net.load_state_dict(state["net"])
        stats = ItemStats(**{k: np.asarray(v) for k, v in state["item_stats"].items()})
        return cls(TifuScorer.from_state(state["tifu"]), stats, net.eval(), int(state["candidates"]), pairs)


def top_candidates(kept: SparseScores, c: int, popularity: np.ndarray) -> np.ndarray:
    """Each row's ``c`` largest kept items, best first, ties to the lower item; a row with fewer
    is filled with the most popular items it lacks, most popular first (ties to the lower item).

    Shapes: kept n rows, popularity [I] -> [n, c] int64.
    """
    n_items = len(popularity)
    offsets = np.asarray(kept.offsets, np.int64)
    out = sparse_top_k(offsets, np.asarray(kept.items, np.int64), -np.asarray(kept.values, np.float64), c)
    short = np.flatnonzero(out[:, -1] < 0)  # rows with fewer than c kept items
    if len(short):
        # A short row holds at most c - 1 of the 2c most popular items: the rest fill it.
        by_popularity = np.lexsort((np.arange(n_items), -popularity))[: 2 * c]  # [P]
        have = np.minimum(np.diff(offsets)[short], c)  # [s]
        keys = short[:, None] * n_items
        mine = out[short]  # [s, c], −1 after a row's kept items
        held = np.isin(keys + by_popularity, (keys + mine)[mine >= 0])  # [s, P]
        slot = have[:, None] + np.cumsum(~held, axis=1) - 1  # the column each item not held would take
        take = ~held & (slot < c)
        out[np.repeat(short, take.sum(1)), slot[take]] = np.broadcast_to(by_popularity, take.shape)[take]
    return out


def training_instances(train: Instances, prefixes: int | None = None, sample: int = SAMPLE, seed: int = 0) -> Instances:
    """Each training instance (u, h) with (u, h − 1), …, (u, h − prefixes + 1) where h − j >= 1
    (default :data:`PREFIXES`); a seeded sample of ``sample`` of them when there are more
    (sorted by customer, then h)."""
    prefixes = PREFIXES if prefixes is None else prefixes
    users = np.concatenate([train.users[train.n_history - j >= 1] for j in range(prefixes)])
    n_hist = np.concatenate([train.n_history[train.n_history - j >= 1] - j for j in range(prefixes)])
    if len(users) > sample:
        keep = np.sort(np.random.default_rng(seed).choice(len(users), sample, replace=False))
        users, n_hist = users[keep], n_hist[keep]
    order = np.lexsort((n_hist, users))
    return Instances(users[order].astype(np.int64), n_hist[order].astype(np.int64))


def target_labels(data: BasketData, instances: Instances, items: np.ndarray) -> np.ndarray:
    """1 where a candidate is in the instance's target basket. Shapes: items [n, C] -> [n, C] float32."""
    n_items = data.n_items
    targets = data.targets(instances.users, instances.n_history)
    owner = np.repeat(np.arange(len(instances), dtype=np.int64), np.diff(targets.offsets))
    keys = np.unique(owner * n_items + targets.values)
    wanted = np.arange(len(instances), dtype=np.int64)[:, None] * n_items + items
    return np.isin(wanted, keys).astype(np.float32)


def fit_stage(
    logits: Logits,
    data: BasketData,
    train: Instances,
    validate: Instances,
    tifu: TifuParams,
    shipped: np.ndarray,
    *,
    seed: int = 0,
    criterion: str = "mean",
    epochs: int = EPOCHS,
    sample: int = SAMPLE,
    pairs: int = TOP,
    prefixes: Sequence[int] = PREFIX_CHOICES,
    threads: int | None = None,
    choose_pairs: bool = True,
) -> tuple[RerankStage, dict[str, Any]]:
    """Learn the stage and decide on the validation customers.

    Args:
        logits: the trained model's scores of given items.
        tifu: TIFU-KNN's parameters (its pool: ``train``'s customers).
        shipped: the shipped ranking of ``validate``, [n_val, >= 20] items best first.
        pairs: item pairs kept per item for the pair columns (over TIFU-KNN's pool); 0: none.
            The columns stay only where they beat the network without them on validation by
            more than one standard error (module docstring; the record's ``item_pairs_kept``);
            ``choose_pairs=False`` keeps them without that comparison (benchmarks and tests of
            the pair columns).
        prefixes: training targets per training customer to try (:func:`training_instances`);
            the network of each is learned from the same start, and the one with the best
            validation criterion is the stage (the first on a tie).
        threads: threads sharing the preparation of the instances' features (default: torch's
            thread count); the stage and the record do not depend on it.

    Returns (the stage at its best validation epoch; the choice as a record: ``kept`` when it
    beats the shipped ranking by more than one standard error, ``item_pairs`` (the pairs asked
    for), ``item_pairs_kept`` and, where the pairs were compared, the criteria with and without
    them, and a one-line ``description``).
    """
    t0 = time.perf_counter()
    threads = torch_thread_count() if threads is None else threads
    n_cand = min(CANDIDATES, data.n_items)
    table = ItemPairs.of(data, capped_pool(train, tifu.pool_cap, tifu.pool_seed), pairs) if pairs > 0 else None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        start = CandidateMLP(len(feature_names(table)), HIDDEN)  # every p's network starts here
    template = RerankStage(TifuScorer.build(data, train, tifu), ItemStats.of(data, train), start, n_cand, table)
    val_items, val_x = _features(template, logits, data, validate, threads)
    base = customer_criterion(shipped, data, validate, criterion)  # [n_val]
    # Every p's instances are prepared once: the shorter lists are mostly inside the longer.
    sets = [training_instances(train, p, sample=sample, seed=seed) for p in prefixes]
    union, rows = _union(sets)
    fit_items, x = _features(template, logits, data, union, threads)
    x, y = torch.from_numpy(x), torch.from_numpy(target_labels(data, union, fit_items))  # [n, C, F], [n, C]
    tried = {}
    for p, fit_inst, mine in zip(prefixes, sets, rows):
        stage = dataclasses.replace(template, net=copy.deepcopy(start))
        tried[p] = (*_learn(stage, x, y, mine, data, validate, val_items, val_x, criterion, epochs, seed), len(fit_inst), stage)
    chosen = max(tried, key=lambda q: tried[q][0][0])  # the first of the best
    (best_criterion, epoch, per_customer), history, n_fit, stage = tried[chosen]
    pair_record: dict[str, Any] = {"item_pairs_kept": table is not None}
    if table is not None and choose_pairs:  # the same network without the pair columns, on the chosen targets
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            plain = dataclasses.replace(template, net=CandidateMLP(len(FEATURES), HIDDEN), pairs=None)
        mine = rows[list(prefixes).index(chosen)]
        (plain_best, plain_epoch, plain_per), plain_history = _learn(
            plain, x, y, mine, data, validate, val_items, val_x, criterion, epochs, seed, columns=len(FEATURES)
        )
        pair_record = _pairs_choice(per_customer, plain_per)
        if not pair_record["item_pairs_kept"]:
            best_criterion, epoch, per_customer, history, stage = plain_best, plain_epoch, plain_per, plain_history, plain
    gain, se = paired_gain(per_customer, base)
    kept = gain > se
    record = {
        "kind": "rerank", "kept": kept, "epoch": epoch, "criterion": criterion,
        "validation_criterion": round(best_criterion, 6), "shipped_criterion": round(float(base.mean()), 6),
        "gain": round(gain, 6), "standard_error": round(se, 6), "by_epoch": history,
        "candidates": n_cand, "item_pairs": pairs, **pair_record, "prefixes": chosen,
        "prefix_criteria": {str(q): round(t[0][0], 6) for q, t in tried.items()},
        "training_instances": n_fit, "seconds": round(time.perf_counter() - t0, 1),
        "description": (
            f"re-ranking of TIFU-KNN's top {n_cand}{_pairs_phrase(pairs, pair_record)}, "
            f"trained on each customer's last {chosen} baskets: validation criterion {best_criterion:.4f} against "
            f"the shipped ranking's {base.mean():.4f} ({gain:+.4f}, standard error {se:.4f}): "
            + ("kept" if kept else "not kept, the shipped ranking stays")
        ),
    }  # fmt: skip
    return stage, record


def _pairs_choice(with_pairs: np.ndarray, without: np.ndarray) -> dict[str, Any]:
    """The pairs' record from the two stages' per-customer validation criteria [n_val]: kept
    when their mean gain exceeds its standard error."""
    gain, se = paired_gain(with_pairs, without)
    return {
        "item_pairs_kept": gain > se, "with_pairs_criterion": round(float(with_pairs.mean()), 6),
        "without_pairs_criterion": round(float(without.mean()), 6),
        "item_pairs_gain": round(gain, 6), "item_pairs_standard_error": round(se, 6),
    }  # fmt: skip


def _pairs_phrase(pairs: int, record: dict[str, Any]) -> str:
    """How the description names the item pairs: kept, tried and left out, or not asked for."""
    if pairs <= 0:
        return ""
    if record["item_pairs_kept"]:
        return f" with item pairs (top {pairs})"
    return (
        f" without item pairs (top {pairs} tried: {record['item_pairs_gain']:+.4f} against the standard "
        f"error {record['item_pairs_standard_error']:.4f})"
    )


def _union(sets: list[Instances]) -> tuple[Instances, list[np.ndarray]]:
    """The distinct instances of ``sets`` (each sorted by customer, then h), sorted the same
    way, and each set's rows in it (ascending, so a set's order is kept).
    Shapes: -> (Instances of U, [len(set)] int64 per set)."""
    span = 1 + max((int(s.n_history.max()) for s in sets if len(s)), default=0)
    keys = [np.asarray(s.users, np.int64) * span + np.asarray(s.n_history, np.int64) for s in sets]
    distinct = np.unique(np.concatenate(keys))
    union = Instances(distinct // span, distinct % span)
    return union, [np.searchsorted(distinct, k) for k in keys]


def _learn(
    stage: RerankStage, x: torch.Tensor, y: torch.Tensor, rows: np.ndarray, data: BasketData,
    validate: Instances, val_items: np.ndarray, val_x: np.ndarray, criterion: str, epochs: int, seed: int,
    columns: int | None = None,
) -> tuple[tuple[float, int, np.ndarray], list[float]]:
    """Train ``stage.net`` on the training instances at ``rows`` of the features x [n, C, F]
    (their first ``columns``; default: all) and labels y [n, C] with the listwise loss, epoch
    by epoch until :data:`PATIENCE` epochs bring no better validation criterion, and leave it at
    its best epoch. Returns ((that criterion, the epoch, its per-customer values [n_val]), the
    criterion of every epoch)."""
    columns = x.shape[-1] if columns is None else columns
    val_x = np.ascontiguousarray(val_x[..., :columns])
    stage.net.standardise_with(x[torch.from_numpy(rows), :, :columns])
    useful = rows[y[torch.from_numpy(rows)].sum(1).numpy() > 0]
    opt = torch.optim.Adam(stage.net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    rng = np.random.default_rng(seed)
    best: tuple[float, int, np.ndarray, dict[str, torch.Tensor]] | None = None
    history = []
    for epoch in range(1, epochs + 1):
        stage.net.train()
        rng.shuffle(useful)
        for start in range(0, len(useful), BATCH):
            pick = torch.from_numpy(useful[start : start + BATCH])
            loss = listwise_loss(stage.net(x[pick, :, :columns]), y[pick])
            opt.zero_grad()
            loss.backward()
            opt.step()
        ranked = np.take_along_axis(val_items, np.argsort(-stage.scores(val_x), axis=1, kind="stable"), axis=1)
        per_customer = customer_criterion(ranked, data, validate, criterion)  # [n_val]
        history.append(round(float(per_customer.mean()), 6))
        if best is None or per_customer.mean() > best[0]:
            best = (float(per_customer.mean()), epoch, per_customer, copy.deepcopy(stage.net.state_dict()))
        elif epoch - best[1] >= PATIENCE:
            break
    assert best is not None
    stage.net.load_state_dict(best[3])
    stage.net.eval()
    return best[:3], history


def _features(
    stage: RerankStage, logits: Logits, data: BasketData, instances: Instances, threads: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """The instances' candidates and their features, the model's scores among them; the
    preparation (:meth:`RerankStage.prepare`) in parts of :data:`PREPARE_ROWS` instances on
    ``threads`` threads. Each instance's row depends on its own inputs alone, so the rows are
    those of one pass. Shapes: -> [n, C], [n, C, F]."""
    n, c = len(instances), stage.candidates
    items = np.empty((n, c), np.int64)
    features = np.empty((n, c, len(stage.features)), np.float32)
    # No instance: the scorer builds the tables it keeps (TIFU-KNN's common rows and dense item
    # columns) here, once, rather than on every thread's first part.
    stage.prepare(data, Instances(instances.users[:0], instances.n_history[:0]))

    def prepare(start: int) -> None:
        part = Instances(instances.users[start : start + PREPARE_ROWS], instances.n_history[start : start + PREPARE_ROWS])
        items[start : start + len(part)], features[start : start + len(part)] = stage.prepare(data, part)

    in_parts(prepare, list(range(0, n, PREPARE_ROWS)), threads)
    features[..., SCORE_COLUMN] = logits(instances, items)
    return items, features
