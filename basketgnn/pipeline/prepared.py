"""Where the pipeline's data stages keep their data, in forms whose memory does not grow with
the log: the ``prepare`` stage's dataset folder, streamed straight from DuckDB into its arrays
file, and the ``split`` stage's split file, customer ids as arrays."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from basketgnn.io_utils import atomic_path

if TYPE_CHECKING:
    from basketgnn.data.dataset import BasketData

#: The split stage's file (``basketgnn.data.split.save_split_arrays``).
SPLIT_FILE = "split.npz"
#: The split stage's training sample (``basketgnn.data.sample.sampled_customers``), when sampling.
SAMPLE_MASK = "sampled.npy"


def prepare_into(
    path: Path, columns: Any, options: Any, out: Path, memory_limit: str | None = None
) -> BasketData:
    """The dataset of ``path`` saved as the folder ``out`` (atomically), and returned.

    A log is streamed by DuckDB straight into the folder's arrays file (Python holds a batch of
    rows, DuckDB what ``memory_limit`` allows, whatever the log's size) and the dataset returned
    maps that file; a DNNTSP .json or a prepared folder is read, then saved.
    """
    from basketgnn import workflow
    from basketgnn.data.dataset import ARRAYS_FILE, check_replaceable
    from basketgnn.data.ingest import prepare_log

    if (path.is_file() and path.suffix == ".json") or (path / "meta.json").is_file():
        data = workflow.prepare(path, columns, options)
        data.save(out)
        return data
    check_replaceable(out)
    engine = {"memory_limit": memory_limit} if memory_limit else {}
    with atomic_path(out, directory=True) as tmp:
        data = prepare_log(path, columns, options, arrays_file=tmp / ARRAYS_FILE, **engine)
        data.save_meta(tmp)
    return data


def split_file(folder: Path) -> Path:
    """The split file of a split stage's folder: ``split.npz``, or ``split.json`` in a folder
    that holds the JSON form only."""
    arrays = folder / SPLIT_FILE
    if arrays.is_file() or not (folder / "split.json").is_file():
        return arrays
    return folder / "split.json"
