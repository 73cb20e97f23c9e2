"""A synthetic transaction log in one frame (:func:`generate_log`), or one slice of a bigger log
(:class:`Chunk`), from the knobs of :class:`~basketgnn.data.synth.knobs.Knobs`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from basketgnn.data.synth.base import COLUMNS, DAY_NS, MINUTE_NS, check, ids, streams
from basketgnn.data.synth.customers import Baskets, basket_counts, basket_items, basket_times
from basketgnn.data.synth.items import ItemStructure
from basketgnn.data.synth.knobs import Knobs


@dataclass(frozen=True)
class Chunk:
    """Which slice of a big log :func:`generate_log` makes (see
    :func:`~basketgnn.data.synth.write.write_log_parts`).

    Chunk ``index`` of ``count`` holds the customers ``first_customer ..
    first_customer + n_customers - 1`` of a log of ``total_customers``. Its customers are drawn
    from their own stream (``index`` of ``count`` spawned from the seed's customer stream), so
    every chunk can be made alone, in any order, and the items are those of the whole log.
    """

    index: int
    count: int
    first_customer: int
    total_customers: int


def generate_log(
    n_customers: int = 2000, *, seed: int = 0, chunk: Chunk | None = None, **knobs: Any
) -> pd.DataFrame:
    """Generate a transaction log with planted structure (see :mod:`basketgnn.data.synth`).

    ``seed``: the same arguments give an identical frame. ``knobs``: the fields of
    :class:`~basketgnn.data.synth.knobs.Knobs` (``n_items``, ``mean_baskets``, ...; an unknown
    name is a ``TypeError``, a value out of range a ``ValueError``). ``chunk``: None = the whole
    log; else one slice of a bigger log: customer ids count from ``chunk.first_customer``,
    basket ids are ``customer index * max_baskets + basket number`` (unique over the whole log,
    in time order per customer), and drift time is day / span_days (not the slice's own
    first-to-last day), so slices fit together.

    Returns one row per (basket, item), sorted by customer, then timestamp (then item), with
    columns ``customer_id`` (str, "C000123"), ``basket_id`` (str, "B0000456", unique over the
    log), ``timestamp`` (datetime64[ns], shared by a basket's rows), ``item_id`` (str, "I0042")
    and ``quantity`` (int64, >= 1). Item ``I0042`` is item index 42 of
    :func:`~basketgnn.data.synth.items.item_structure`.
    """
    check(n_customers >= 1, "n_customers must be at least 1")
    k = Knobs(**knobs)
    items = k.items(seed)
    rng = np.random.default_rng(_customer_stream(seed, chunk, n_customers))
    baskets = Baskets.of(basket_counts(rng, n_customers, k.mean_baskets, k.max_baskets, k.history_spread))
    day, minute = basket_times(rng, baskets, k.mean_gap_days, k.gap_regularity, k.span_days)
    timestamp = (
        np.datetime64(k.start_date, "D").astype("datetime64[ns]").astype(np.int64)
        + day * DAY_NS
        + minute * MINUTE_NS
    )
    if chunk is None:
        t_norm = (day - day.min()) / max(int(day.max() - day.min()), 1)  # [B] in [0, 1]
    else:  # the same clock in every slice
        t_norm = np.clip(day / k.span_days, 0.0, 1.0)
    row_basket, row_item = basket_items(rng, items, baskets, t_norm, k)
    quantity = 1 + rng.poisson(k.mean_extra_quantity, size=len(row_basket))
    return _frame(baskets, chunk, k.max_baskets, items, timestamp, row_basket, row_item, quantity)


def _customer_stream(seed: int, chunk: Chunk | None, n_customers: int) -> np.random.SeedSequence:
    """The seed's customer stream, or the chunk's own stream spawned from it."""
    stream = streams(seed)[1]
    if chunk is None:
        return stream
    check(0 <= chunk.index < chunk.count, "chunk.index must be in [0, chunk.count)")
    check(
        chunk.first_customer + n_customers <= chunk.total_customers,
        "a chunk's customers must lie inside chunk.total_customers",
    )
    return stream.spawn(chunk.count)[chunk.index]


def _frame(
    baskets: Baskets,
    chunk: Chunk | None,
    max_baskets: int,
    items: ItemStructure,
    timestamp: np.ndarray,
    row_basket: np.ndarray,
    row_item: np.ndarray,
    quantity: np.ndarray,
) -> pd.DataFrame:
    """The log's frame (:data:`COLUMNS`) with the ids of the whole log or of the chunk.

    Shapes: timestamp [B] ns; row_basket, row_item, quantity [rows].
    """
    n_customers, basket_user = len(baskets.n_baskets), baskets.basket_user
    if chunk is None:
        customer_ids = ids("C", n_customers, 6)
        basket_ids = ids("B", len(basket_user), 7)
    else:
        total = chunk.total_customers
        customer_ids = ids("C", n_customers, 6, chunk.first_customer, total)
        basket_number = (chunk.first_customer + basket_user) * max_baskets + baskets.basket_seq
        basket_ids = ids("B", len(basket_user), 7, 0, total * max_baskets, basket_number)
    return pd.DataFrame(
        {
            "customer_id": customer_ids[basket_user[row_basket]],
            "basket_id": basket_ids[row_basket],
            "timestamp": timestamp[row_basket].astype("datetime64[ns]"),
            "item_id": items.item_ids[row_item],
            "quantity": quantity.astype(np.int64),
        },
        columns=list(COLUMNS),
    )
