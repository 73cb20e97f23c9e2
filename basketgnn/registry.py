"""Every recommender by name, baselines and neural models alike: names to import paths, nothing
more (the CLI, the pipeline, the ablation and checkpoints find models here and nowhere else; the
workflow builds them, :func:`basketgnn.workflow.training.train`).

A neural model is registered by one line in :data:`NEURAL`: its name, the package whose
``__init__.py`` exposes ``SPEC: ModelSpec`` (imported only when the model is used, so the CLI
starts fast) and a one-line description for help texts and error messages. A baseline is one
line in :data:`BASELINES`: its name, ``module:Class`` and description.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from basketgnn.errors import UserError

#: name -> (module:Class, description). Fitted on the split's training part, in seconds.
BASELINES: dict[str, tuple[str, str]] = {
    "g-topfreq": ("basketgnn.recommenders.topfreq:GTopFreq", "most popular items overall"),
    "p-topfreq": ("basketgnn.recommenders.topfreq:PTopFreq", "each customer's most bought items, then popular ones"),
    "tifu-knn": ("basketgnn.recommenders.tifu_knn:TifuKnn", "TIFU-KNN (Hu et al., SIGIR 2020), tuned on validation"),
    "up-cf": ("basketgnn.recommenders.up_cf:UpCf", "UP-CF@r (Faggioli et al., UMAP 2020), tuned on validation"),
}

#: name -> (package exposing SPEC, description). Trained by the engine (basketgnn.engine).
NEURAL: dict[str, tuple[str, str]] = {
    "dnntsp": ("basketgnn.models.dnntsp", "DNNTSP (Yu et al., KDD 2020): weighted GCN, temporal attention, gated scorer"),
    "sasrec": ("basketgnn.models.sasrec", "SASRec: causal self-attention over the basket sequence (Kang & McAuley 2018)"),
    "bert4rec": ("basketgnn.models.bert4rec", "BERT4Rec: bidirectional self-attention with Cloze training (Sun et al. 2019)"),
    "din": ("basketgnn.models.din", "DIN: target attention of every item over the history (Zhou et al. 2018)"),
}

DEFAULT_MODEL = "dnntsp"


@dataclass(frozen=True)
class ModelInfo:
    name: str
    kind: Literal["baseline", "neural"]
    description: str


def models() -> list[ModelInfo]:
    """Every registered model, baselines first."""
    return [ModelInfo(n, "baseline", d) for n, (_, d) in BASELINES.items()] + [
        ModelInfo(n, "neural", d) for n, (_, d) in NEURAL.items()
    ]


def names(kind: Literal["baseline", "neural"] | None = None) -> list[str]:
    return [m.name for m in models() if kind is None or m.kind == kind]


def is_neural(name: str) -> bool:
    return name in NEURAL


def help_text(kind: Literal["baseline", "neural"] | None = None) -> str:
    """``name (description); ...`` for CLI help."""
    return "; ".join(f"{m.name} ({m.description})" for m in models() if kind is None or m.kind == kind)


def check_name(name: str, where: str = "", kind: Literal["baseline", "neural"] | None = None) -> None:
    """A :class:`UserError` listing the valid names when ``name`` is not a registered model."""
    valid = names(kind)
    if name not in valid:
        what = {"baseline": "baseline", "neural": "trainable model", None: "model"}[kind]
        problem = f"unknown {what} {name!r}; choose one of {', '.join(valid)}."
        raise UserError(f"{where}{problem}" if where else problem[0].upper() + problem[1:])


def get_spec(name: str, where: str = "") -> Any:
    """The :class:`~basketgnn.models.spec.ModelSpec` of a neural model (its package imported
    now)."""
    check_name(name, where, "neural")
    spec = importlib.import_module(NEURAL[name][0]).SPEC
    if spec.name != name:
        raise RuntimeError(f"{NEURAL[name][0]}.SPEC is named {spec.name!r}, registered as {name!r}")
    return spec


def config_class(name: str) -> Any:
    """The config class of a neural model (a :class:`~basketgnn.models.options.TrainOptions`)."""
    return get_spec(name).config_cls


def make_baseline(name: str, **kwargs: Any) -> Any:
    """A new, unfitted baseline; ``kwargs`` go to its constructor.

    Raises :class:`UserError` for an unknown name (listing the valid ones), options the baseline
    does not take, or invalid option values.
    """
    check_name(name, kind="baseline")
    module, cls = BASELINES[name][0].split(":")
    try:
        return getattr(importlib.import_module(module), cls)(**kwargs)
    except (TypeError, ValueError) as e:
        raise UserError(f"Baseline {name!r}: invalid options ({e}).") from None
