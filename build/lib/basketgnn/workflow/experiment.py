"""Evaluation for every front end: prepare -> split -> train -> evaluate, as one
:class:`Experiment`, and the one choice of a model by its validation figure.

As in cornac's ``Experiment(eval_method, models, metrics)``, an experiment is data: a split, a
list of :class:`~basketgnn.workflow.training.ModelEntry`, and the cut-offs. Every model is found by
name in :mod:`basketgnn.registry`, so nothing here names one. Result rows are one typed record,
:class:`ModelResult`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Split, make_split
from basketgnn.errors import UserError
from basketgnn.metrics import KS
from basketgnn.recommenders.base import Recommender
from basketgnn.scoring.fusion_choice import CRITERION, criterion_ks
from basketgnn.workflow.harness import evaluate_model
from basketgnn.workflow.recommendations import recommend_all
from basketgnn.workflow.training import FitOutcome, ModelEntry, train


@dataclass(frozen=True)
class ModelResult:
    """One machine-readable result row: the keys of ``evaluate --output``, the demo's, the
    pipeline's and the ablation's records (see :meth:`to_json`). ``validation``: the figure the
    choice by validation compares (:func:`validation_record`), when measured."""

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
    fusion: dict[str, Any] | None = None  # what the fusion step chose ({weight, k}), if it ran
    validation: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        record = {
            "model": self.model,
            "params": self.params,
            "data": self.data,
            "split": self.split,
            "part": self.part,
            "n_users": self.n_users,
            "metrics": self.metrics,
            "timing_s": self.timing_s,
            "best_epoch": self.best_epoch,
            "epochs_run": self.epochs_run,
            "fusion": self.fusion,
        }
        return record if self.validation is None else {**record, "validation": self.validation}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ModelResult:
        optional = {k: d.get(k) for k in ("best_epoch", "epochs_run", "fusion", "validation")}
        return cls(**{k: d[k] for k in ("model", "params", "data", "split", "part", "n_users",
                                        "metrics", "timing_s")}, **optional)


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


def evaluate(
    outcome: FitOutcome,
    data: BasketData,
    sp: Split,
    part: str = "test",
    data_label: str = "",
    ks: tuple[int, ...] = KS,
    *,
    with_validation: bool = False,
) -> ModelResult:
    """Metrics of a fitted model on ``sp[part]`` as a :class:`ModelResult` (``with_validation``:
    with its :func:`validation_record`)."""
    if part not in sp.parts:
        raise UserError(f"Unknown split part {part!r}; choose one of {', '.join(sp.parts)}.")
    instances = sp[part]
    metrics, score_s = evaluate_model(outcome.recommender, data, instances, ks)
    params = outcome.recommender.params()
    training = outcome.training
    fusion = None
    if outcome.fusion is not None:
        fusion = {"weight": outcome.fusion["weight"], "k": outcome.fusion["k"]}
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
        fusion=fusion,
        validation=validation_record(outcome.recommender, data, sp) if with_validation else None,
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
            outcome = train(entry, self.data, self.split, progress=self.progress, on_epoch=hook)
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


def validation_record(model: Any, data: BasketData, sp: Split) -> dict[str, Any]:
    """A fitted model's ranking metrics on the validation customers and its validation
    criterion (``scoring.fusion_choice.CRITERION`` at the cut-offs that fit the catalogue): the figure
    :func:`select_by_validation` compares."""
    cuts = criterion_ks(data.n_items)
    metrics, _ = evaluate_model(model, data, sp["validate"], ks=cuts)
    values = {f"{m}@{k}": metrics[f"{m}@{k}"] for m in CRITERION for k in cuts}
    return {"criterion": sum(values.values()) / len(values), "metrics": values}


def select_by_validation(records: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The model whose validation criterion is best (ties: the first listed), and why.

    Shapes: result records (:meth:`ModelResult.to_json`), each with a ``validation`` entry.
    """
    scores = {r["model"]: r["validation"]["criterion"] for r in records}
    best = max(scores, key=lambda name: scores[name])  # max keeps the first of equals
    others = ", ".join(f"{n} {v:.4f}" for n, v in scores.items() if n != best)
    reason = (
        f"{best}, best validation mean of recall, NDCG and PHR at 10 and 20: "
        f"{scores[best]:.4f}" + (f" (against {others})" if others else "")
    )
    return best, {"rule": "best validation criterion", "validation_criterion": scores,
                  "reason": reason}
