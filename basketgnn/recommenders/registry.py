"""The baselines by name, for the CLI and experiment scripts."""

from __future__ import annotations

from typing import Any

from basketgnn.errors import UserError
from basketgnn.recommenders.base import Recommender
from basketgnn.recommenders.tifu_knn import TifuKnn
from basketgnn.recommenders.topfreq import GTopFreq, PTopFreq

BASELINES: dict[str, type[Recommender]] = {
    GTopFreq.name: GTopFreq,
    PTopFreq.name: PTopFreq,
    TifuKnn.name: TifuKnn,
}


def make_baseline(name: str, **kwargs: Any) -> Recommender:
    """A new, unfitted baseline; ``kwargs`` go to its constructor.

    Raises :class:`UserError` for an unknown name (listing the valid ones), options the baseline
    does not take, or invalid option values.
    """
    if name not in BASELINES:
        raise UserError(f"Unknown baseline {name!r}; choose one of {', '.join(sorted(BASELINES))}.")
    try:
        return BASELINES[name](**kwargs)
    except (TypeError, ValueError) as e:
        raise UserError(f"Baseline {name!r}: invalid options ({e}).") from None
