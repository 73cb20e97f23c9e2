"""What the generator's modules share: the column order of a log, time units, the seed's random
streams, zero-padded ids and argument checks."""

from __future__ import annotations

import numpy as np

#: Column order of a generated log.
COLUMNS = ("customer_id", "basket_id", "timestamp", "item_id", "quantity")

MINUTE_NS = 60 * 10**9
DAY_NS = 24 * 60 * MINUTE_NS


def streams(seed: int) -> list[np.random.SeedSequence]:
    """Independent streams for the items (0) and the customers (1) of one seed."""
    return np.random.SeedSequence(seed).spawn(2)


def ids(
    prefix: str,
    n: int,
    min_width: int,
    first: int = 0,
    total: int | None = None,
    numbers: np.ndarray | None = None,
) -> np.ndarray:
    """Zero-padded ids ``prefix + number``, equally wide so they sort like the numbers: the
    numbers ``first .. first + n - 1`` (or the given ``numbers``), as wide as the largest of
    ``total`` (default: of these). Shape [n]."""
    total = first + n if total is None else total
    width = max(min_width, len(str(max(total - 1, 0))))
    values = range(first, first + n) if numbers is None else numbers.tolist()
    return np.array([f"{prefix}{i:0{width}d}" for i in values], dtype=object)


def check(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``."""
    if not ok:
        raise ValueError(message)
