"""Fixtures shared by the data tests: the ingestion engines (DuckDB, checked against its pandas
oracle, and the oracle itself) and a CLI runner. Plain helpers and the small logs the ingestion
tests share are in ``tests/support/ingest.py``."""

from __future__ import annotations

import pytest

from tests.support.ingest import DUCKDB, PANDAS, Engine


@pytest.fixture(params=[PANDAS, DUCKDB], ids=str)
def engine(request) -> Engine:
    """Each engine in turn: the pandas oracle, then DuckDB (whose datasets and messages are
    checked to be the oracle's)."""
    return request.param


@pytest.fixture
def duckdb_engine() -> Engine:
    """The DuckDB engine, its datasets checked against the pandas oracle's."""
    return DUCKDB
