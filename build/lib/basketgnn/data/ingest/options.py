"""What a user sets to turn a transaction log into a dataset: the log's column names
(:class:`Columns`) and the filters and caps (:class:`PrepareOptions`), applied in the order
listed in :mod:`basketgnn.data.ingest`.

These models are the one declaration of the ingestion options: field names are the ones a user
writes (``--last-n`` on the command line, ``input.last_n`` in a pipeline file), and each field's
default, constraints and one-line description are what the CLI and the pipeline show and check;
:func:`option_error` words a refused value for the user, in the CLI's or the pipeline's terms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from basketgnn.errors import UserError

#: Default basket-size cap of ``prepare`` and the pipeline (None: no cap). The one place to change it.
DEFAULT_MAX_BASKET_ITEMS: int | None = None


class Columns(BaseModel):
    """Names of the log's columns. ``basket`` and/or ``timestamp`` must be set (checked when a
    log is read); ``quantity`` is optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    customer: str = Field("customer_id", description="Names the customer id column.")
    item: str = Field("item_id", description="Names the item id column.")
    basket: str | None = Field(
        "basket_id",
        description="Names the basket id column; unset: a basket is a customer's rows at one time.",
    )
    timestamp: str | None = Field(
        "timestamp",
        description="Names the timestamp column; unset: baskets are ordered by their basket id.",
    )
    quantity: str | None = Field(
        None,
        description="Names the quantity column, whose rows <= 0 are returns; unset: all purchases.",
    )


class PrepareOptions(BaseModel):
    """How a log becomes a dataset; applied in the order of :mod:`basketgnn.data.ingest`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_item_baskets: int = Field(
        1, ge=1, description="Drops items bought in fewer baskets than this, and emptied baskets."
    )
    last_n: int | None = Field(
        None, ge=1, description="Keeps only each customer's last N baskets; unset: all of them."
    )
    min_baskets: int = Field(
        2, ge=2, description="Drops customers with fewer baskets than this (a history and a target)."
    )
    max_baskets: int | None = Field(
        None, ge=2, description="Drops customers with more baskets than this; unset: no limit."
    )
    on_bad_rows: Literal["error", "skip"] = Field(
        "error",
        description="Stops at bad rows (missing id, bad timestamp or quantity) or skips them.",
    )
    where: str | None = Field(
        None, description="Drops the rows where this DuckDB condition over the columns is not true."
    )
    keep_returns: bool = Field(
        False, description="Keeps rows with quantity <= 0 as ordinary rows rather than excluding them."
    )
    max_basket_items: int | None = Field(
        DEFAULT_MAX_BASKET_ITEMS,
        ge=1,
        description="Caps every basket at its N most popular items; unset: no cap.",
    )
    time_format: str | None = Field(
        None, description="Reads text timestamps with this strptime format; unset: ISO dates and times."
    )


def cli_flag(name: str) -> str:
    """The command-line flag of an option: ``last_n`` -> ``--last-n``."""
    return "--" + name.replace("_", "-")


def option_error(error: ValidationError, spell: Callable[[str], str] = cli_flag) -> UserError:
    """A :class:`UserError` for the values a model refused, each option named as the user
    writes it (``spell``: the CLI's flag by default; e.g. ``lambda n: f"input.{n}"`` for a
    pipeline file), with its value and what it must be."""
    problems = []
    for e in error.errors():
        name = spell(".".join(str(part) for part in e["loc"]))
        if e["type"] == "greater_than_equal":
            problems.append(f"{name} must be at least {e['ctx']['ge']}, not {e['input']!r}")
        elif e["type"] == "extra_forbidden":
            problems.append(f"{name} is not an option")
        else:
            problems.append(f"{name}: {e['msg']} (got {e['input']!r})")
    return UserError("; ".join(problems) + ".")
