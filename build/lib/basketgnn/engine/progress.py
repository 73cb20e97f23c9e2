"""Progress output that suits where it goes.

At a terminal a tqdm bar redraws in place. Anywhere else (cron, CI, a log file) a redrawn bar
is a stream of carriage returns, so there is no bar at all and the caller's one line per epoch
or stage (with elapsed time) is the whole record.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TextIO, TypeVar

T = TypeVar("T")


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr, where bars go) is an interactive terminal."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class _Silent(Generic[T]):
    """The bar's interface, doing nothing."""

    def __init__(self, items: Iterable[T]) -> None:
        self._items = items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def set_postfix(self, **kwargs: Any) -> None:
        pass


def progress_bar(items: Iterable[T], desc: str, enabled: bool = True, unit: str = "it") -> Any:
    """A tqdm bar over ``items`` when ``enabled`` and stderr is a terminal, else a silent
    iterable with the same ``set_postfix``."""
    if not (enabled and is_terminal()):
        return _Silent(items)
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, leave=False, unit=unit)
