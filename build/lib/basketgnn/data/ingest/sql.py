"""SQL text for DuckDB: literals, identifiers, the first line of an error, and the ISO
timestamp pattern that both reading and validation use."""

from __future__ import annotations

# The timestamp strings accepted (listed in :mod:`.duckdb_engine`); DuckDB's cast does the parsing, this
# keeps out what it would read differently from pandas ("epoch", time zone names).
ISO_RE = (
    r"\d{4}-\d{1,2}-\d{1,2}"
    r"([T ]+\d{1,2}(:\d{1,2}(:\d{1,2}(\.\d+)?)?)?)?"
    r"\s*(Z|UTC|[+-]\d{2}(:?\d{2})?)?"
)


def lit(s: str) -> str:
    """A SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


def ident(name: str) -> str:
    """A quoted SQL identifier (column names may hold any character)."""
    return '"' + name.replace('"', '""') + '"'


def first_line(e: BaseException) -> str:
    """The first line of an error's message (DuckDB's run on with context lines)."""
    text = str(e)
    return text.splitlines()[0] if text else ""
