"""What a user sets to turn a transaction log into a dataset: the log's column names
(:class:`Columns`) and the filters and caps (:class:`PrepareOptions`), applied in the order
listed in :mod:`basketgnn.data.ingest`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Default basket-size cap of ``prepare`` and the pipeline (None: no cap). The one place to change it.
DEFAULT_MAX_BASKET_ITEMS: int | None = None


@dataclass(frozen=True)
class Columns:
    """Names of the log's columns. ``basket`` and/or ``timestamp`` must be set; ``quantity`` is
    optional (None: every row is a purchase)."""

    customer: str = "customer_id"
    item: str = "item_id"
    basket: str | None = "basket_id"
    timestamp: str | None = "timestamp"
    quantity: str | None = None


@dataclass(frozen=True)
class PrepareOptions:
    """How a log becomes a dataset; applied in the order of the module docstring."""

    min_item_baskets: int = 1
    """Drop items bought in fewer baskets than this (baskets left empty are dropped)."""
    last_n_baskets: int | None = None
    """Keep only each customer's most recent N baskets."""
    min_baskets: int = 2
    """Drop customers with fewer baskets than this (a history needs at least one plus a target)."""
    max_baskets: int | None = None
    """Drop customers with more baskets than this."""
    on_bad_rows: Literal["error", "skip"] = "error"
    """What to do with bad rows: a missing id, an unparsable timestamp, a bad quantity."""
    where: str | None = None
    """A DuckDB boolean expression over the log's columns; rows where it is not true are dropped."""
    keep_returns: bool = False
    """With a quantity column: keep rows with quantity <= 0 as ordinary rows instead of excluding them."""
    max_basket_items: int | None = DEFAULT_MAX_BASKET_ITEMS
    """Cap every basket at its N most popular items (item popularity over the whole log)."""
    time_format: str | None = None
    """strptime format of text timestamps (e.g. "%m/%d/%Y %H:%M"); None: ISO dates and times."""
