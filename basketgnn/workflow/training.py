"""The one way to make, train and load a model: ``basketgnn train``, the demo, the pipeline's fit
stage and the ablation all call :func:`train`, and every command that reads a checkpoint calls
:func:`load_trained`.

Training a neural model is two steps on one checkpoint: the engine trains the model and writes
best.pt (:mod:`basketgnn.engine`), then the fusion with TIFU-KNN is chosen on the validation
customers (:func:`basketgnn.recommenders.fused.choose`) and stored as the checkpoint's
``fusion`` section: the fusion options, the choice (None when off) and the fusion's state (None
when the model alone validated best). A baseline is fitted in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from basketgnn import registry
from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Split
from basketgnn.engine.checkpoint import set_section
from basketgnn.errors import UserError
from basketgnn.recommenders import fused, reranked
from basketgnn.recommenders.base import Recommender
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.scoring.tifu import TifuParams
from basketgnn.workflow.config import Settings, settings_from


@dataclass(frozen=True)
class ModelEntry:
    """One model to train: a registry name, its options (a baseline's constructor options, or a
    neural model's :class:`Settings` or a mapping of config keys) and, for neural models, the
    folder its training writes (best.pt, resume.pt, train_log.jsonl; None: nowhere) and the
    checkpoint its training starts from (warm start; None: from scratch)."""

    name: str
    options: Any = None
    out_dir: Path | None = None
    label: str | None = None  # shown and recorded instead of the name (an ablation variant)
    warm_start: Path | None = None
    # Where the training data came from, added to the checkpoint's extras so that commands that
    # read it find its data: :func:`data_stamp`.
    stamp: dict[str, str] | None = None


def data_stamp(data: str | Path, split_spec: str | Path) -> dict[str, str]:
    """The checkpoint stamp of a training run: its data (a path) and its split (a split file or
    a split kind)."""
    return {"data": str(Path(data).resolve()), "split_spec": str(split_spec)}


@dataclass
class FitOutcome:
    """A fitted model: the recommender (fused when validation chose a fusion), the seconds
    fitting took, the engine's training summary (neural models trained here) and the fusion's
    choice record (None: off, or a baseline)."""

    entry: ModelEntry
    recommender: Recommender
    fit_s: float
    training: Any = None
    fusion: dict[str, Any] | None = None
    #: The re-ranking stage's choice record (None: not asked for).
    rerank: dict[str, Any] | None = None


def settings(entry: ModelEntry) -> Settings:
    """A neural entry's settings (its options as given, or read as config keys)."""
    if isinstance(entry.options, Settings):
        return entry.options
    return settings_from(dict(entry.options or {}), entry.name)


def train(
    entry: ModelEntry,
    data: BasketData,
    sp: Split,
    *,
    progress: bool = False,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> FitOutcome:
    """Fit ``entry`` on the split's training part; its validation part chooses the best epoch,
    a baseline's tuning and the fusion."""
    registry.check_name(entry.name)
    t0 = time.perf_counter()
    if not registry.is_neural(entry.name):
        if entry.warm_start is not None:
            raise UserError(f"{entry.name} is a baseline: only trained models start from a checkpoint.")
        model = registry.make_baseline(entry.name, **(entry.options or {}))
        model.fit(data, sp["train"], sp["validate"])
        return FitOutcome(entry, model, time.perf_counter() - t0)
    s = settings(entry)
    base = NeuralRecommender(
        registry.get_spec(entry.name), s.model, out_dir=entry.out_dir, progress=progress,
        on_epoch=on_epoch, warm_start=entry.warm_start, extras={"fusion_options": s.fusion.model_dump()},
    )
    base.fit(data, sp["train"], sp["validate"])
    if base.result.rank != 0:  # other ranks of a torchrun: rank 0 chooses and writes
        return FitOutcome(entry, base, time.perf_counter() - t0, base.result)
    best = Path(entry.out_dir) / "best.pt" if entry.out_dir is not None else None
    if best is not None and not best.is_file():
        raise UserError(f"{best}: training wrote no checkpoint; delete {best.parent} and train again.")
    options = s.fusion.model_dump()
    if best is not None:  # "not chosen yet" until the choice is stored: a crash leaves it so
        set_section(best, fused.SECTION, {"options": options, "chosen": False, "choice": None, "state": None})
    model, choice = fused.choose(base, data, sp["train"], sp["validate"], s.fusion)
    base.fusion_choice = choice
    if best is not None:
        section = {"options": options, "chosen": True, "choice": choice, "state": model.state() if model else None}
        set_section(best, fused.SECTION, section, **(entry.stamp or {}))
    shipped = model or base
    rerank = None
    if s.fusion.rerank:
        shipped, rerank = _rerank(shipped, choice, data, sp, s, best)
    return FitOutcome(entry, shipped, time.perf_counter() - t0, base.result, choice, rerank)


def _rerank(
    shipped: Any, choice: dict[str, Any] | None, data: BasketData, sp: Split, s: Settings, best: Path | None
) -> tuple[Any, dict[str, Any]]:
    """The re-ranking stage over what the fusion ships, learned and chosen on validation
    (:func:`basketgnn.recommenders.reranked.choose`), stored as the checkpoint's ``rerank``
    section. Returns (what ships, the choice record)."""
    if choice is None or choice.get("tuned_tifu") is None:
        raise UserError("rerank: true reads TIFU-KNN's parts: it needs fusion: tifu.")
    tifu = TifuParams(**choice["tuned_tifu"])
    wrapper, record = reranked.choose(
        shipped, data, sp["train"], sp["validate"], tifu, seed=s.model.seed, criterion=s.fusion.fusion_criterion,
        pairs=s.fusion.rerank_pairs,
    )
    if best is not None:
        set_section(best, reranked.SECTION, {"choice": record, "state": wrapper.state() if wrapper else None})
    return wrapper or shipped, record


def load_trained(path: str | Path, device: str | None = None, *, model_only: bool = False) -> Any:
    """The recommender a checkpoint holds: the model, wrapped by its fusion when validation chose
    one (``model_only``: never). A checkpoint whose training stopped before the fusion was chosen
    ranks by the model alone, with a warning."""
    base, section = NeuralRecommender.from_checkpoint(path, device)
    if model_only:
        return base
    # The fusion options of the run: its section's, or (training stopped before the section
    # was written) those stored with the model.
    options = (section or {}).get("options") or base.checkpoint.get("fusion_options") or {}
    chosen = section is not None and section.get("chosen", True)  # False only while choosing
    if options.get("fusion", "off") != "off" and not chosen:
        import warnings

        warnings.warn(
            f"{path}: the run stopped before choosing its fusion with TIFU-KNN; this checkpoint "
            "ranks by the model alone. Rerun the same `basketgnn train` to finish it.",
            stacklevel=2,
        )
        return base
    try:
        base.fusion_choice = (section or {}).get("choice")
        shipped = fused.from_section(base, section)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(
            f"{path}: its fusion section cannot be read ({type(e).__name__}: {e}); train it again."
        ) from None
    try:
        return reranked.from_section(shipped, base.sections.get(reranked.SECTION)) if options.get("rerank") else shipped
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(
            f"{path}: its re-ranking section cannot be read ({type(e).__name__}: {e}); train it again."
        ) from None


def load_trained_with_data(
    checkpoint: str | Path, data: str | Path | None = None, device: str | None = None, *,
    model_only: bool = False,
) -> tuple[Any, BasketData, Path, int]:  # fmt: skip
    """:func:`load_trained` and the data to score with it: ``data`` (default: the data the
    checkpoint records) aligned to its catalogue. Returns (recommender, data, the data's path,
    basket entries dropped as items the checkpoint does not know)."""
    from basketgnn.data.ingest import load_data

    recommender = load_trained(checkpoint, device, model_only=model_only)
    if data is None:
        if "data" not in recommender.checkpoint:
            raise UserError(f"{checkpoint} does not record its data; pass --data.")
        data = recommender.checkpoint["data"]
    dataset, dropped = load_data(Path(data)).aligned_to(recommender.item_ids)
    return recommender, dataset, Path(data), dropped
