"""An item catalogue (``basketgnn prepare --items FILE``): categorical columns of each item
(department, category, brand, ...) joined to a prepared dataset by item id.

The file is a CSV or Parquet table with one row per item: an id column, read as text the way the
log's item column is (an integer-typed Parquet id 123 is "123"), and any categorical columns.
Every value is read as text; a missing cell is the value "unknown".

In the prepared data each column becomes codes aligned with the item index: ``codes[i, c]`` is
1 + the position of item i's value in the column's sorted values, and 0 for "unknown" (a missing
cell, or an item of the log that the catalogue lacks, with ``missing="unknown"``). Only the
values of the dataset's items are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np

from basketgnn.errors import UserError

CATALOGUE_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")
UNKNOWN = "unknown"
#: Example ids shown in an error about items the catalogue lacks.
SHOWN_IDS = 5


@dataclass(frozen=True)
class ItemCatalogue:
    """Categorical item features aligned with a dataset's item index.

    Shapes: codes [n_items, n_columns] int32 (0 = unknown, k >= 1 = values[c][k - 1]);
    values[c] [size(c) - 1] str, sorted.
    """

    columns: tuple[str, ...]
    codes: np.ndarray
    values: tuple[np.ndarray, ...]

    def size(self, column: str) -> int:
        """Number of codes of a column, "unknown" included."""
        return len(self.values[self.columns.index(column)]) + 1

    def select(self, columns: list[str], where: str = "") -> np.ndarray:
        """The codes of the named columns, in that order; a UserError naming the available
        columns for one the catalogue lacks. Shape [n_items, len(columns)]."""
        unknown = [c for c in columns if c not in self.columns]
        if unknown:
            raise UserError(
                f"{where}the item catalogue has no column {', '.join(repr(c) for c in unknown)}; "
                f"its columns are {', '.join(repr(c) for c in self.columns)}."
            )
        return self.codes[:, [self.columns.index(c) for c in columns]]

    def arrays(self) -> dict[str, np.ndarray]:
        """What :meth:`from_arrays` reads back (the file ``catalogue.npz`` of a dataset)."""
        return {"codes": self.codes, **{f"values_{j}": v.astype(str) for j, v in enumerate(self.values)}}

    @classmethod
    def from_arrays(cls, columns: list[str], arrays: Any) -> ItemCatalogue:
        return cls(
            columns=tuple(columns),
            codes=np.asarray(arrays["codes"], dtype=np.int32),
            values=tuple(np.asarray(arrays[f"values_{j}"]) for j in range(len(columns))),
        )


def read_catalogue(
    path: str | Path, id_column: str, columns: list[str] | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(item ids [n] str, {column: values [n] object, None where missing}) of a catalogue file;
    ``columns`` None takes every column but the id. Raises a UserError naming the file, the
    column or the row for a missing file or column, an empty id or a repeated id."""
    from basketgnn.data.ingest.sql import first_line, ident
    from basketgnn.data.ingest.stage import _as_text, _csv_header, _parquet_schema, _read_csv_sql

    f = Path(path)
    if not f.is_file():
        raise UserError(f"{f}: no such item catalogue file (--items).")
    if not f.name.lower().endswith(CATALOGUE_SUFFIXES):
        raise UserError(f"{f}: an item catalogue must be a CSV or Parquet file ({', '.join(CATALOGUE_SUFFIXES)}).")
    con = duckdb.connect()
    try:
        if f.name.lower().endswith((".parquet", ".pq")):
            schema = _parquet_schema(con, f)
            source, row = f"read_parquet('{_sql_path(f)}', file_row_number = true)", "file_row_number + 1"
        else:
            names, skip = _csv_header(f)
            schema, source, row = dict.fromkeys(names, "VARCHAR"), _read_csv_sql(f, names, skip), "ordinality"
        chosen = _check_columns(f, list(schema), id_column, columns)
        select = ", ".join(f"{_as_text(c, schema)} AS {ident(c)}" for c in [id_column, *chosen])
        table = con.execute(f"SELECT {row}::BIGINT AS __row, {select} FROM {source} ORDER BY __row").fetchnumpy()
    except UserError:
        raise
    except (duckdb.Error, OSError, UnicodeDecodeError) as e:
        raise UserError(f"{f}: cannot be read as an item catalogue ({type(e).__name__}: {first_line(e)}).") from None
    finally:
        con.close()
    rows = np.asarray(table["__row"], dtype=np.int64)
    ids = _column(table[id_column])
    _check_ids(f, id_column, ids, rows)
    return ids.astype(str), {c: _column(table[c]) for c in chosen}


def attach_catalogue(
    data: Any,
    path: str | Path,
    id_column: str,
    columns: list[str] | None = None,
    missing: Literal["error", "unknown"] = "error",
) -> Any:
    """``data`` (a BasketData) with the catalogue's codes aligned to its items and
    ``meta["catalogue"]`` describing them. Items of the data the catalogue lacks stop the run
    (``missing="error"``, the message names some and the way on) or get "unknown" in every
    column (``missing="unknown"``)."""
    from dataclasses import replace

    f = Path(path)
    ids, values = read_catalogue(f, id_column, columns)
    row_of = {k: r for r, k in enumerate(ids.tolist())}
    rows = np.asarray([row_of.get(str(k), -1) for k in data.item_ids.tolist()], dtype=np.int64)  # [I]
    absent = rows < 0
    if absent.any() and missing == "error":
        shown = ", ".join(repr(str(k)) for k in data.item_ids[absent][:SHOWN_IDS])
        raise UserError(
            f"{f}: {int(absent.sum()):,} of the {data.n_items:,} items of the log are not in the item "
            f"catalogue (column {id_column!r}), e.g. {shown}. Add rows for them, or pass "
            f"--items-missing {UNKNOWN} to give them the value {UNKNOWN!r} in every column."
        )
    codes, kept = [], []
    for cells in values.values():
        code, vocabulary = _codes(cells, rows)
        codes.append(code)
        kept.append(vocabulary)
    catalogue = ItemCatalogue(
        columns=tuple(values),
        codes=np.stack(codes, axis=1) if codes else np.zeros((data.n_items, 0), np.int32),
        values=tuple(kept),
    )
    described = {
        "source": str(f), "id_column": id_column, "columns": list(catalogue.columns),
        "sizes": [catalogue.size(c) for c in catalogue.columns], "items_missing": int(absent.sum()),
        "unknown_values": {c: int((catalogue.codes[:, j] == 0).sum()) for j, c in enumerate(catalogue.columns)},
    }  # fmt: skip
    return replace(data, catalogue=catalogue, meta={**data.meta, "catalogue": described})


def catalogue_lines(meta: dict[str, Any]) -> list[str]:
    """What ``prepare`` prints about the catalogue it joined (none without one)."""
    described = meta.get("catalogue")
    if not described:
        return []
    sizes = ", ".join(f"{c} {n - 1:,}" for c, n in zip(described["columns"], described["sizes"]))
    lines = [f"item catalogue {described['source']}: values per column: {sizes or 'no columns'}"]
    if described["items_missing"]:
        lines.append(f"{described['items_missing']:,} item(s) not in the catalogue: {UNKNOWN!r} in every column")
    return lines


def _sql_path(f: Path) -> str:
    return str(f).replace("'", "''")


def _check_columns(f: Path, available: list[str], id_column: str, columns: list[str] | None) -> list[str]:
    """The categorical columns to read (every one but the id when ``columns`` is None)."""
    if id_column not in available:
        raise UserError(
            f"{f}: no item id column {id_column!r}; the file has {', '.join(repr(c) for c in available)}. "
            "Name the id column with --items-id-col."
        )
    if columns is None:
        return [c for c in available if c != id_column]
    unknown = [c for c in columns if c not in available]
    if unknown:
        raise UserError(
            f"{f}: no column {', '.join(repr(c) for c in unknown)}; the file has "
            f"{', '.join(repr(c) for c in available)}. Fix --items-cols."
        )
    return [c for c in dict.fromkeys(columns) if c != id_column]


def _column(values: Any) -> np.ndarray:
    """A fetched text column as an object array, None where missing. Shape [n]."""
    if isinstance(values, np.ma.MaskedArray):
        out = values.data.astype(object)
        out[np.ma.getmaskarray(values)] = None
        return out
    return np.asarray(values, dtype=object)


def _check_ids(f: Path, id_column: str, ids: np.ndarray, rows: np.ndarray) -> None:
    """A UserError for a row without an id or an id on two rows (the first such row)."""
    empty = np.flatnonzero(np.asarray([k is None for k in ids.tolist()], dtype=bool))
    if len(empty):
        raise UserError(f"{f}: row {rows[empty[0]]} has no item id (column {id_column!r}); give every row an id.")
    first: dict[str, int] = {}
    for r, k in enumerate(ids.tolist()):
        if k in first:
            raise UserError(
                f"{f}: item id {k!r} appears twice (column {id_column!r}, rows {rows[first[k]]} and "
                f"{rows[r]}, counted from 1 after the header); give each item one row."
            )
        first[k] = r


def _codes(cells: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the dataset's items in one column (0 = unknown) and the sorted values kept.
    Shapes: cells [n] catalogue rows, rows [I] (-1 = not in the catalogue) -> [I] int32, [K]."""
    item_cells = np.full(len(rows), None, dtype=object)  # [I]
    inside = rows >= 0
    item_cells[inside] = cells[rows[inside]]
    known = np.asarray([v is not None for v in item_cells.tolist()], dtype=bool)
    vocabulary, inverse = np.unique(item_cells[known].astype(str), return_inverse=True)
    code = np.zeros(len(rows), dtype=np.int32)
    code[known] = inverse.astype(np.int32) + 1
    return code, vocabulary
