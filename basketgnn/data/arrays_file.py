"""The prepared dataset's ``arrays.npz`` written a chunk at a time and read memory-mapped.

``arrays.npz`` is what ``np.savez`` writes: an uncompressed (stored) zip of ``NAME.npy`` files.
Because nothing is compressed, each array's bytes lie in the file as they are, and
:func:`load_arrays` maps them (``np.memmap``) instead of reading them: loading costs no memory,
and only the pages a computation touches are read, as the operating system's cache (clean file
pages it can drop at will, not the process's own memory).

:class:`ArraysWriter` writes the same file from chunks (an array's length known in advance):
each member is the ``.npy`` header ``np.save`` writes, then the values, so a file streamed here
and one written by ``np.savez`` hold the same bytes for each member, and either is read by
``np.load`` and by :func:`load_arrays` alike.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a zip member's local file header (30 bytes)
_LOCAL_SIGNATURE = b"PK\x03\x04"


def load_arrays(path: str | Path, mmap: bool = True) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file by name (without ``.npy``): read-only views of the file
    when ``mmap`` and the file is uncompressed, else read into memory with ``np.load``.

    Arrays of Python objects are refused (as ``np.load(allow_pickle=False)`` does).
    """
    path = Path(path)
    if not mmap or not _all_stored(path):
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            shape, fortran, dtype, offset = _member_array(f, info)
            if dtype.hasobject:
                raise ValueError(f"{path}: {info.filename} holds Python objects; not loaded")
            name = info.filename.removesuffix(".npy")
            if int(np.prod(shape)) == 0:
                out[name] = np.zeros(shape, dtype=dtype)
                continue
            mm = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                           order="F" if fortran else "C")  # fmt: skip
            out[name] = mm.view(np.ndarray)  # a plain read-only array over the mapping
    return out


def _all_stored(path: Path) -> bool:
    with zipfile.ZipFile(path) as z:
        return all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())


def _member_array(f: IO[bytes], info: zipfile.ZipInfo) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, Fortran order, dtype, file offset of the values) of a stored ``.npy`` member."""
    f.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
    if fields[0] != _LOCAL_SIGNATURE:
        raise ValueError(f"{info.filename}: not a zip member at offset {info.header_offset}")
    name_len, extra_len = fields[-2], fields[-1]
    f.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    return shape, fortran, dtype, f.tell()


class ArraysWriter:
    """Writes an ``.npz`` file (as ``np.savez`` would) one array at a time, each from chunks.

    Usage::

        with ArraysWriter(path) as w:
            with w.array("items", np.int32, n) as put:
                for chunk in chunks:
                    put(chunk)          # cast to int32; n values in all, else ValueError
            w.whole("item_ids", ids)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path, "w", zipfile.ZIP_STORED, allowZip64=True)

    def __enter__(self) -> ArraysWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._zip.close()

    @contextmanager
    def array(self, name: str, dtype: Any, n: int) -> Iterator[Any]:
        """A 1-d array of ``n`` values of ``dtype``: yields ``put(values)``, to be called with
        consecutive chunks; raises ValueError when they do not add up to ``n`` values."""
        dtype = np.dtype(dtype)
        written = 0
        with self._zip.open(name + ".npy", "w", force_zip64=True) as fp:
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                      "shape": (int(n),)}  # fmt: skip
            np.lib.format.write_array_header_1_0(fp, header)

            def put(values: Any) -> None:
                nonlocal written
                chunk = np.ascontiguousarray(values, dtype=dtype)
                if written + len(chunk) > n:
                    raise ValueError(f"{name}: more than the {n:,} values announced")
                fp.write(memoryview(chunk.view(np.uint8)))
                written += len(chunk)

            yield put
            if written != n:
                raise ValueError(f"{name}: {written:,} values written, {n:,} announced")

    def whole(self, name: str, values: np.ndarray) -> None:
        """An array already in memory (or mapped), as ``np.savez`` writes it."""
        with self._zip.open(name + ".npy", "w", force_zip64=True) as fp:
            np.lib.format.write_array(fp, np.asanyarray(values), allow_pickle=False)
