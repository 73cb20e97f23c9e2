"""Writing logs: one file, atomically (:func:`write_log`), or a big log as a folder of Parquet
parts made chunk by chunk (:func:`write_log_parts`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from basketgnn.data.synth.base import check
from basketgnn.data.synth.generate import Chunk, generate_log
from basketgnn.io_utils import atomic_path


def write_log(df: pd.DataFrame, path: str | Path) -> None:
    """Write a log as CSV (``.csv``) or Parquet (``.parquet``), atomically.

    The file is written under a temporary name in the destination folder and renamed into place,
    so readers never see a half-written log. Missing parent folders are created.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in {".csv", ".parquet"}:
        raise ValueError(
            f"cannot write a log to {str(path)!r}: the file name must end in .csv or .parquet "
            f"(got {path.suffix or 'no extension'!r})"
        )
    with atomic_path(path) as tmp:
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


def write_log_parts(
    out_dir: str | Path,
    n_customers: int,
    chunk_customers: int = 50_000,
    seed: int = 0,
    on_part: Callable[[int, int, int], None] | None = None,
    **settings: Any,
) -> list[Path]:
    """Write a big log as a folder of Parquet parts, one :class:`Chunk` of customers each.

    Memory stays that of one chunk (``chunk_customers`` customers), whatever ``n_customers``.
    Parts ``part-00000.parquet`` ... are written into a hidden sibling ``.NAME.partial/`` (each
    one atomically) and the folder is renamed to ``out_dir`` once all are there: readers never
    see a half-written log, and a rerun with the same arguments keeps the parts already written
    (a rerun with other arguments starts over). ``settings`` are :func:`~basketgnn.data.synth.generate.generate_log`'s knobs.
    ``on_part(index, count, rows)`` is called after each part. Returns the parts' paths.
    """
    check(n_customers >= 1, "n_customers must be at least 1")
    check(chunk_customers >= 1, "chunk_customers must be at least 1")
    out_dir = Path(out_dir)
    partial = out_dir.with_name(f".{out_dir.name}.partial")
    wanted = json.dumps(
        {"n_customers": n_customers, "chunk_customers": chunk_customers, "seed": seed,
         "settings": settings}, sort_keys=True, default=list,
    )  # fmt: skip
    marker = partial / "_settings.json"
    if partial.exists() and not (marker.is_file() and marker.read_text() == wanted):
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    marker.write_text(wanted)
    count = -(-n_customers // chunk_customers)
    names = [f"part-{j:05d}.parquet" for j in range(count)]
    for j, name in enumerate(names):
        if (partial / name).is_file():
            continue
        first = j * chunk_customers
        size = min(chunk_customers, n_customers - first)
        df = generate_log(
            n_customers=size, seed=seed, chunk=Chunk(j, count, first, n_customers), **settings
        )
        write_log(df, partial / name)
        if on_part is not None:
            on_part(j, count, len(df))
    marker.unlink()
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(partial, out_dir)
        shutil.rmtree(old)
    else:
        os.replace(partial, out_dir)
    return [out_dir / name for name in names]
