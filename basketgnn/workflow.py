"""The one workflow core: prepare -> split -> fit -> evaluate -> recommend.

The demo (``basketgnn demo``), the pipeline (``basketgnn/pipeline/run.py``) and the ablation
(``basketgnn/experiments/ablation.py``) are front ends to these functions; none of them fits,
evaluates or recommends on its own. As in cornac's ``Experiment(eval_method, models, metrics)``,
an experiment is data: a split, a list of :class:`ModelEntry`, and the cut-offs, run by
:class:`Experiment`. Every model is found by name in :mod:`basketgnn.registry`, so nothing
here names one.

Records that leave this module are typed: :class:`FitOutcome`, :class:`ModelResult`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from basketgnn import registry
from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Split, make_split
from basketgnn.errors import UserError
from basketgnn.evaluate import evaluate_model
from basketgnn.metrics import KS
from basketgnn.recommend import recommend_all
from basketgnn.recommenders.base import Recommender

# --- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelEntry:
    """One model of an experiment: a registry name, its options (a baseline's constructor
    options, or a neural model's config / overrides) and, for neural models, the folder its
    training writes (best.pt, resume.pt, train_log.jsonl; None: nowhere) and the checkpoint its
    training starts from (warm start; None: from scratch)."""

    name: str
    options: Any = None
    out_dir: Path | None = None
    label: str | None = None  # shown and recorded instead of the name (an ablation variant)
    warm_start: Path | None = None


@dataclass
class FitOutcome:
    """A fitted model: the recommender, the seconds fitting took and, for neural models, the
    training summary (best epoch, history, the add-on choice)."""

    entry: ModelEntry
    recommender: Recommender
    fit_s: float

    @property
    def training(self) -> Any:
        """The engine's TrainResult (None for a baseline or a loaded checkpoint)."""
        return getattr(self.recommender, "result", None)


@dataclass(frozen=True)
class ModelResult:
    """One machine-readable result row: the keys of ``evaluate --output``, the demo's and the
    pipeline's metrics.json (see :meth:`to_json`)."""

    model: str
    params: dict[str, Any]
    data: str
    split: str
    part: str
    n_users: int
    metrics: dict[str, float | None]
    timing_s: dict[str, float]
    best_epoch: int | None = None
    epochs_run: int | None = None
    addon: dict[str, Any] | None = None  # what the add-on step chose ({kind, k, weight}), if any

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "params": self.params,
            "data": self.data,
            "split": self.split,
            "part": self.part,
            "n_users": self.n_users,
            "metrics": self.metrics,
            "timing_s": self.timing_s,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ModelResult:
        return cls(**{k: d[k] for k in ("model", "params", "data", "split", "part", "n_users",
                                        "metrics", "timing_s")})


# --- the steps --------------------------------------------------------------------------------


def prepare(
    path: Path,
    columns: Any = None,
    options: Any = None,
    memory_limit: str | None = None,
) -> BasketData:
    """A DNNTSP .json split as published, a prepared dataset folder as saved, or a transaction
    log (CSV / Parquet, file or folder) read by DuckDB (``basketgnn.data.ingest.prepare_log``)."""
    from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log, read_dnntsp_json

    path = Path(path)
    if path.is_file() and path.suffix == ".json":
        return read_dnntsp_json(path)
    if path.is_dir() and (path / "meta.json").is_file():
        return BasketData.load(path)
    engine = {"memory_limit": memory_limit} if memory_limit else {}
    return prepare_log(path, columns or Columns(), options or PrepareOptions(), **engine)


def split(data: BasketData, kind: str = "auto", seed: int = 0) -> Split:
    """See :func:`basketgnn.data.split.make_split`."""
    return make_split(data, kind, seed)


def make(entry: ModelEntry, *, progress: bool = False, on_epoch: Callable[[dict[str, Any]], None] | None = None) -> Recommender:
    """An unfitted recommender for ``entry`` (registry name, options, training folder)."""
    return registry.make_recommender(
        entry.name, entry.options, out_dir=entry.out_dir, progress=progress, on_epoch=on_epoch,
        warm_start=entry.warm_start,
    )


def fit(
    entry: ModelEntry,
    data: BasketData,
    sp: Split,
    *,
    progress: bool = False,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> FitOutcome:
    """Fit on the split's training part; its validation part chooses epochs / tuning."""
    recommender = make(entry, progress=progress, on_epoch=on_epoch)
    t0 = time.perf_counter()
    recommender.fit(data, sp["train"], sp["validate"])
    return FitOutcome(entry, recommender, time.perf_counter() - t0)


def evaluate(
    outcome: FitOutcome,
    data: BasketData,
    sp: Split,
    part: str = "test",
    data_label: str = "",
    ks: tuple[int, ...] = KS,
) -> ModelResult:
    """Metrics of a fitted model on ``sp[part]`` as a :class:`ModelResult`."""
    if part not in sp.parts:
        raise UserError(f"Unknown split part {part!r}; choose one of {', '.join(sp.parts)}.")
    instances = sp[part]
    metrics, score_s = evaluate_model(outcome.recommender, data, instances, ks)
    params = outcome.recommender.params()
    training = outcome.training
    addon = None
    if training is not None and training.addon is not None:
        addon = {"kind": training.addon.kind, "k": training.addon.k, "weight": training.addon.weight}
    return ModelResult(
        model=outcome.entry.label or outcome.recommender.name,
        params=params,
        data=data_label,
        split=sp.name,
        part=part,
        n_users=len(instances),
        metrics={k: (None if math.isnan(v) else round(float(v), 6)) for k, v in metrics.items()},
        timing_s={"fit": round(outcome.fit_s, 3), "score": round(score_s, 3)},
        best_epoch=training.best_epoch if training is not None else params.get("best_epoch"),
        epochs_run=training.epochs_run if training is not None else params.get("epochs_run"),
        addon=addon,
    )


def recommend(recommender: Recommender, data: BasketData, k: int) -> pd.DataFrame:
    """Top-k rows (customer_id, item_id, rank, score) for every customer, full history."""
    return recommend_all(recommender, data, k)


# --- an experiment ----------------------------------------------------------------------------


@dataclass
class Experiment:
    """A split, models and cut-offs; :meth:`run` fits every model on the training part and
    evaluates it on ``part``, one model at a time (``on_model`` hears of each result)."""

    data: BasketData
    split: Split
    models: list[ModelEntry]
    part: str = "test"
    ks: tuple[int, ...] = KS
    data_label: str = ""
    progress: bool = False
    on_epoch: Callable[[ModelEntry, dict[str, Any]], None] | None = None
    on_model: Callable[[ModelResult], None] | None = None
    fitted: dict[str, FitOutcome] = field(default_factory=dict)

    def run(self) -> list[ModelResult]:
        if self.part not in self.split.parts:
            raise UserError(f"Unknown split part {self.part!r}; choose one of {', '.join(self.split.parts)}.")
        results = []
        for entry in self.models:
            hook = None
            if self.on_epoch is not None:
                hook = functools.partial(self.on_epoch, entry)
            outcome = fit(entry, self.data, self.split, progress=self.progress, on_epoch=hook)
            self.fitted[entry.label or entry.name] = outcome
            result = evaluate(outcome, self.data, self.split, self.part, self.data_label, self.ks)
            results.append(result)
            if self.on_model is not None:
                self.on_model(result)
        return results


def first_customer_line(frame: pd.DataFrame, n: int = 5) -> str:
    """``customer C: item (score), ...`` of the first customer of a recommendations frame."""
    first = frame[frame["customer_id"] == frame["customer_id"].iloc[0]].head(n)
    return f"customer {first['customer_id'].iloc[0]}: " + ", ".join(
        f"{i} ({s:.2f})" for i, s in zip(first["item_id"], np.asarray(first["score"]))
    )
