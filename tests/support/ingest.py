"""Helpers shared by the ingestion tests (the engines of the `engine` fixtures in
tests/data/conftest.py, the small logs, a real export's shape, comparisons).

:class:`Engine` runs the ingestion engine (DuckDB, ``prepare_log``) or its pandas test oracle
(tests/support/pandas_oracle.py); the DuckDB one also checks that its dataset (or its error
message) is the oracle's, so every case run on both also checks that they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log
from basketgnn.errors import UserError
from tests.support.pandas_oracle import prepare_log_pandas

HEADER = ["customer_id", "basket_id", "timestamp", "item_id"]

ROWS = [
    # customer c2's baskets arrive out of order in the file; b3 repeats item x.
    ["c2", "b4", "2024-01-05", "y"],
    ["c1", "b1", "2024-01-01", "x"],
    ["c1", "b1", "2024-01-01", "y"],
    ["c2", "b3", "2024-01-02", "x"],
    ["c2", "b3", "2024-01-02", "x"],
    ["c1", "b2", "2024-01-03", "z"],
    ["c2", "b5", "2024-01-09", "z"],
]

ARRAYS = ("items", "basket_offsets", "user_offsets", "basket_times", "user_ids", "item_ids",
          "user_part")  # fmt: skip

# A real export's columns (tests/data/test_ingest_options.py, tests/cli/test_cli_data.py).
EXPORT = ["InvoiceNo", "StockCode", "Quantity", "InvoiceDate", "CustomerID"]
EXPORT_COLUMNS = Columns(
    customer="CustomerID", item="StockCode", basket="InvoiceNo", timestamp="InvoiceDate",
    quantity="Quantity",
)

# An export in the shape of a real one: cancellations ('C' invoices, negative quantities), a postage
# code, a customer written as a float, a row without customer.
EXPORT_ROWS = [
    ["536365", "A", "6", "2010-12-01 08:26", "17850.0"],
    ["536365", "B", "2", "2010-12-01 08:26", "17850.0"],
    ["536365", "POST", "1", "2010-12-01 08:26", "17850.0"],
    ["C536379", "B", "-2", "2010-12-02 09:41", "17850.0"],  # the cancellation of B
    ["536380", "C", "3", "2010-12-03 10:00", "17850.0"],
    ["536381", "A", "1", "2010-12-01 11:00", "13047"],
    ["536382", "M", "1", "2010-12-04 11:00", "13047"],  # manual adjustment: a basket of its own
    ["536383", "C", "0", "2010-12-05 11:00", "13047"],  # zero quantity: a return too
    ["536384", "B", "4", "2010-12-06 11:00", "13047"],
    ["536385", "A", "1", "2010-12-06 11:00", None],  # no customer
]


def write_csv(folder: Path, rows: list[list[Any]], name: str = "log.csv",
              columns: list[str] | None = None) -> Path:  # fmt: skip
    path = folder / name
    pd.DataFrame(rows, columns=columns or HEADER).to_csv(path, index=False)
    return path


def baskets_by_id(data: BasketData) -> dict[str, list[list[str]]]:
    """Each customer's baskets in order, as sorted lists of original item ids."""
    return {
        str(data.user_ids[u]): [sorted(data.item_ids[b].tolist()) for b in data.user_baskets(u)]
        for u in range(data.n_users)
    }


def assert_same_arrays(ours: BasketData, reference: BasketData) -> None:
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name), err_msg=name)
        assert getattr(ours, name).dtype == getattr(reference, name).dtype, name


def assert_same(ours: BasketData, reference: BasketData) -> None:
    """Same arrays, dtypes and report; and ``ours`` is a valid dataset."""
    assert_same_arrays(ours, reference)
    assert ours.meta["report"] == reference.meta["report"]
    ours.validate()


@dataclass(frozen=True)
class Engine:
    """``duckdb`` (prepare_log, the engine) or ``pandas`` (prepare_log_pandas, the oracle)."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def function(self) -> Callable[..., BasketData]:
        """The engine's own function, without the comparison with pandas."""
        return prepare_log_pandas if self.name == "pandas" else prepare_log

    def prepare(
        self,
        path: Path,
        columns: Columns = Columns(),
        options: PrepareOptions = PrepareOptions(),
        **duckdb_kwargs: Any,
    ) -> BasketData:
        """The engine's dataset; DuckDB's is first checked equal to pandas' (:func:`assert_same`)."""
        if self.name == "pandas":
            return prepare_log_pandas(path, columns, options)
        ours = prepare_log(path, columns, options, **duckdb_kwargs)
        reference = prepare_log_pandas(path, columns, options)
        assert_same(ours, reference)
        # Built in about 3 parts, each a range of customers: the same dataset.
        part_rows = max(1, reference.meta["report"]["rows_read"] // 3)
        assert_same(prepare_log(path, columns, options, **{"part_rows": part_rows, **duckdb_kwargs}), ours)
        return ours

    def error(
        self,
        path: Path,
        columns: Columns = Columns(),
        options: PrepareOptions = PrepareOptions(),
        match: str | None = None,
        same_as_pandas: bool = True,
    ) -> str:
        """The engine's UserError message (matching ``match``); with ``same_as_pandas``, DuckDB's
        is checked to be pandas' word for word."""
        with pytest.raises(UserError, match=match) as ours:
            self.function(path, columns, options)
        if self.name == "duckdb" and same_as_pandas:
            with pytest.raises(UserError) as reference:
                prepare_log_pandas(path, columns, options)
            assert str(ours.value) == str(reference.value)
        return str(ours.value)


PANDAS, DUCKDB = Engine("pandas"), Engine("duckdb")
