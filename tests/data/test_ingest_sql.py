"""SQL text helpers (``data/ingest/sql.py``): literals and identifiers survive any character,
and the ISO timestamp pattern accepts exactly the documented spellings."""

from __future__ import annotations

import duckdb
import pytest

from basketgnn.data.ingest.sql import ISO_RE, first_line, ident, lit


@pytest.mark.parametrize("text", ["plain", "it's", "''", 'a "quoted" one', "ü € \\n", ""])
def test_literal_and_identifier_round_trip(text):
    con = duckdb.connect()
    assert con.execute(f"SELECT {lit(text)}").fetchall() == [(text,)]
    if text:
        assert con.execute(f"SELECT 1 AS {ident(text)}").description[0][0] == text


@pytest.mark.parametrize(
    ("value", "iso"),
    [
        ("2024-01-31", True), ("2024-1-3 7:05", True), ("2024-01-31T13:45:00.123Z", True),
        ("2024-01-31 13:45 UTC", True), ("2024-01-31 13:45+0130", True), ("2024-01-31 13:45-01", True),
        ("01/31/2024", False), ("epoch", False), ("2024-01-31 Europe/Paris", False), ("20240131", False),
    ],
)  # fmt: skip
def test_iso_pattern(value, iso):
    con = duckdb.connect()
    assert con.execute(f"SELECT regexp_full_match({lit(value)}, {lit(ISO_RE)})").fetchall()[0][0] is iso


def test_first_line():
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(ValueError()) == ""
