"""The one data fingerprint: a hash of what a dataset holds, so that caches, resumes and result
lines never mix two datasets.

- :func:`data_fingerprint` hashes loaded data (every array and id of a
  :class:`~basketgnn.data.dataset.BasketData`, optionally instance sets and a description);
  the training engine (resume) and the pipeline (stage cache) use it.
- :func:`source_fingerprint` hashes a dataset *on disk* without loading it (the bytes of a
  DNNTSP .json, or the arrays of a prepared folder), so the ablation grid can tell finished
  runs from pending ones before it loads anything.
- :func:`settings_hash` hashes settings (any JSON-like value): the pipeline's stage keys.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.errors import UserError


def data_fingerprint(
    data: BasketData, *instance_sets: Instances, described: dict[str, Any] | None = None
) -> str:
    """sha256 (hex) of the data's arrays and ids, of ``instance_sets`` and of ``described``
    (what later stages say about the data: its source, the ingestion report)."""
    h = hashlib.sha256()
    if described is not None:
        h.update(json.dumps(described, sort_keys=True).encode())
    for arr in (data.items, data.basket_offsets, data.user_offsets, data.basket_times, data.user_part):
        _update_array(h, arr)
    for ids in (data.user_ids, data.item_ids):
        _update_json_list(h, np.asarray(ids))
    for inst in instance_sets:
        _update_array(h, inst.users)
        _update_array(h, inst.n_history)
    return h.hexdigest()


#: Values hashed per block (memory stays a block's, the hash is that of the whole).
_BLOCK = 1 << 22


def _update_array(h: Any, arr: np.ndarray) -> None:
    """``h.update(arr.tobytes())``, a block at a time (no copy of a contiguous array)."""
    flat = np.asarray(arr).reshape(-1)
    for start in range(0, len(flat), _BLOCK):
        block = np.ascontiguousarray(flat[start : start + _BLOCK])
        h.update(memoryview(block.view(np.uint8)))


def _update_json_list(h: Any, ids: np.ndarray) -> None:
    """``h.update(json.dumps(ids.tolist()).encode())``, a block of values at a time."""
    h.update(b"[")
    for start in range(0, len(ids), _BLOCK // 8):
        text = json.dumps(ids[start : start + _BLOCK // 8].tolist())[1:-1]  # the block's values, ", " between
        h.update(((", " if start else "") + text).encode())
    h.update(b"]")


def settings_hash(obj: Any, digits: int | None = None) -> str:
    """sha256 (hex; its first ``digits`` digits when given) of ``obj`` as JSON with sorted keys,
    json's default separators (``", "`` and ``": "``) and ``str()`` of any value JSON has no
    form for (a path, a date). Equal settings give equal hashes whatever their key order."""
    text = json.dumps(obj, sort_keys=True, separators=(", ", ": "), default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return digest if digits is None else digest[:digits]


def source_fingerprint(path: Path, where: str = "") -> str:
    """sha256 (16 hex digits) of what a dataset on disk holds: the bytes of a file (a DNNTSP
    .json), or the arrays of a prepared dataset folder. The folder's meta.json (where and how it
    was prepared) and the zip entries' dates in arrays.npz are left out, so preparing the same
    data again keeps the hash. ``where`` prefixes the error message (e.g. the spec file)."""
    h = hashlib.sha256()

    def add(f: Any) -> None:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)

    try:
        if path.is_dir():
            with zipfile.ZipFile(path / "arrays.npz") as z:
                for member in sorted(z.namelist()):
                    h.update(member.encode() + b"\0")
                    with z.open(member) as f:
                        add(f)
        else:
            with open(path, "rb") as f:
                add(f)
    except (OSError, zipfile.BadZipFile) as e:
        what = "prepared dataset folder" if path.is_dir() else "dataset file"
        raise UserError(
            f"{where}{path} is not a readable {what} ({e}). Name a prepared dataset folder "
            "(`basketgnn prepare LOG --out FOLDER`) or a DNNTSP .json file."
        ) from None
    return h.hexdigest()[:16]
