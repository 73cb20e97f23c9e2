"""Atomic output: every file the project writes appears whole or not at all.

A writer gets a temporary path in the destination's own folder (so the final rename is atomic on
the same filesystem); the rename happens only when the writer returned without error.

A set of files that belong together (the pipeline's recommendations, metrics and report) is
published by :func:`publish_files`: staged whole first, then renamed into place, so that a crash
never leaves new files next to old ones that a finished staging would not complete.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | Path, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``path``; on success it replaces ``path`` in one rename.

    With ``directory=True`` the temporary path is an empty folder. An existing destination folder
    is moved aside first and removed only after the new one is in place, so a crash leaves either
    the old or the new folder, never a half-written one under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        # mkstemp creates 0600; give the file the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        if directory:
            old = None
            if path.exists():
                old = path.with_name(f".{path.name}.old-{os.getpid()}")
                os.replace(path, old)
            os.replace(tmp, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


#: The staging folder of :func:`publish_files`, inside the destination folder.
PUBLISH_STAGING = ".publishing"
#: Written last into the staging folder: the set is complete; what to move in and delete.
PUBLISH_MANIFEST = "_staged.json"


def publish_files(
    folder: str | Path, files: Iterable[Path], remove: Iterable[str] = ()
) -> list[str]:
    """Put ``files`` into ``folder`` under their own names, and delete the names in ``remove``,
    as one set.

    Every file is first placed (and synced) into ``folder/.publishing/``: hard-linked when it is
    on the same filesystem (the sources are finished files that are replaced, never rewritten,
    so a link costs no disk and no time whatever the file's size), copied otherwise. Only when
    all of them are there does a manifest mark the staging complete, and only then are they
    renamed into place one by one and the ``remove`` names deleted. A crash while staging leaves
    ``folder`` as it was; a crash among the renames leaves a complete staging that
    :func:`finish_publishing` (called here first, and by the pipeline when it starts) carries
    out. A file identical to the one in place is not placed again, so the one in place keeps its
    modification time.

    One publisher at a time per folder (the pipeline holds its run folder's lock).
    Returns the names that were replaced or added.
    """
    folder = Path(folder)
    files = list(files)
    names = [f.name for f in files]
    if len(set(names)) != len(names) or PUBLISH_MANIFEST in names:
        raise ValueError(f"cannot publish files with these names together: {names}")
    folder.mkdir(parents=True, exist_ok=True)
    finish_publishing(folder)
    staging = folder / PUBLISH_STAGING
    staging.mkdir()
    try:
        changed = []
        for src in files:
            dst = folder / src.name
            if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
                continue
            _link_or_copy(src, staging / src.name)
            _fsync(staging / src.name)
            changed.append(src.name)
        manifest = {"move": changed, "remove": sorted(set(remove) - set(names))}
        tmp = staging / f".{PUBLISH_MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest) + "\n")
        _fsync(tmp)
        _fsync(staging)  # the staged files' names are durable before the manifest says so
        os.replace(tmp, staging / PUBLISH_MANIFEST)
        _fsync(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finish_publishing(folder)
    return changed


def finish_publishing(folder: str | Path) -> bool:
    """Carry out a publication of :func:`publish_files` that a crash interrupted.

    A complete staging (manifest present) is moved into place (what was moved already is not
    there any more and is skipped); an incomplete one is deleted, leaving ``folder`` as it was.
    Returns True when there was a complete staging to finish.
    """
    staging = Path(folder) / PUBLISH_STAGING
    manifest_path = staging / PUBLISH_MANIFEST
    if not manifest_path.is_file():
        if staging.exists():
            shutil.rmtree(staging)
        return False
    manifest = json.loads(manifest_path.read_text())
    for name in manifest["move"]:
        if (staging / name).exists():
            os.replace(staging / name, Path(folder) / name)
    for name in manifest["remove"]:
        (Path(folder) / name).unlink(missing_ok=True)
    _fsync(Path(folder))
    shutil.rmtree(staging)
    return True


def _link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src``, or a copy where the filesystem does not allow one."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _fsync(path: Path) -> None:
    """Flush a file's content, or a folder's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Partitioned (Parquet dataset) output: a folder of ``part-XXXXX.parquet`` files that appear
# whole or not at all, read by DuckDB (``read_parquet('DIR/part-*.parquet')``) or Spark
# (``spark.read.parquet(DIR)``; names starting with ``.`` or ``_``, i.e. temporary files and
# manifests, are skipped by both).

#: File name pattern of part ``i`` of a partitioned dataset.
PART_PATTERN = "part-{:05d}.parquet"


def part_path(folder: str | Path, index: int) -> Path:
    """``folder/part-XXXXX.parquet`` for part ``index`` (five digits, zero-padded)."""
    return Path(folder) / PART_PATTERN.format(index)


def part_index(path: str | Path) -> int | None:
    """The index of a ``part-XXXXX.parquet`` name, None for any other name."""
    name = Path(path).name
    stem = name[len("part-") : -len(".parquet")]
    if name.startswith("part-") and name.endswith(".parquet") and stem.isdigit():
        return int(stem)
    return None


def write_table_stream(
    path: str | Path | Sequence[str | Path],
    tables: Iterable[Any],
    schema: Any,
    *,
    metadata: dict[str, str] | None = None,
) -> int:
    """Stream pyarrow tables into a Parquet (or, by a ``.csv`` name, CSV) file, atomically; or
    into several files at once (``path`` a list: the tables are made once, written to each).

    Tables are written one at a time as they come (one Parquet row group each), so memory holds
    one table, never the whole file. ``metadata`` goes into the Parquet footer's key-value
    metadata (ignored for CSV). The files are renamed into place once all are written and closed.
    Returns the number of rows written (to each file).
    """
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if metadata:
        schema = schema.with_metadata({**(schema.metadata or {}), **metadata})
    rows = 0
    with contextlib.ExitStack() as renames:
        tmps = [renames.enter_context(atomic_path(p)) for p in paths]
        with contextlib.ExitStack() as files:  # every file is closed (footer written) before any rename
            writers: list[Any] = []
            for p, tmp in zip(paths, tmps, strict=True):
                if p.name.endswith(".csv"):
                    options = pacsv.WriteOptions(quoting_style="needed")
                    writers.append(files.enter_context(pacsv.CSVWriter(tmp, schema, write_options=options)))
                else:
                    writers.append(files.enter_context(pq.ParquetWriter(tmp, schema, use_dictionary=dictionary_columns(schema))))
            for table in tables:
                for writer in writers:
                    writer.write_table(table)
                rows += table.num_rows
    return rows


def dictionary_columns(schema: Any) -> list[str]:
    """The columns a Parquet file of ``schema`` dictionary-encodes: all but the floating-point
    ones. Ids and ranks repeat and shrink to small dictionaries; scores rarely repeat, so a
    dictionary of them only grows until the writer falls back to plain pages, which costs more
    time than the plain encoding and gives a larger file."""
    import pyarrow as pa

    return [f.name for f in schema if not pa.types.is_floating(f.type)]


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
