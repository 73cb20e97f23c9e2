"""The prepared dataset: every customer's baskets as flat arrays with offsets (CSR, two levels).

Layout, with a worked example of two customers (u0: {3, 5} then {5}; u1: {1}):

    items          = [3, 5, 5, 1]      # item index of every basket entry, basket by basket
    basket_offsets = [0, 2, 3, 4]      # basket b = items[basket_offsets[b]:basket_offsets[b + 1]]
    user_offsets   = [0, 2, 3]         # user u = baskets user_offsets[u] .. user_offsets[u + 1] - 1

Memory is proportional to the data (no Python lists of lists). A saved dataset is loaded
memory-mapped (:mod:`basketgnn.data.arrays_file`): the arrays are views of the file, read page
by page as they are used, so a dataset larger than memory can still be loaded and streamed.

On disk a prepared dataset is a folder (format documented in ``data/README.md``)::

    meta.json     format name and version, counts, source, preparation options
    arrays.npz    items, basket_offsets, user_offsets, basket_times, user_ids, item_ids, user_part
    catalogue.npz (with an item catalogue, ``prepare --items``) codes [n_items, C], values_0 ..
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from basketgnn.data.arrays_file import ArraysWriter, load_arrays
from basketgnn.data.catalogue import ItemCatalogue
from basketgnn.errors import UserError
from basketgnn.io_utils import atomic_path

FORMAT_NAME = "basketgnn-dataset"
FORMAT_VERSION = 1
#: Names of the parts of a predefined user split, in ``user_part`` code order (0, 1, 2).
PARTS = ("train", "validate", "test")
NO_TIME = np.iinfo(np.int64).min
#: The arrays' file inside a prepared dataset folder.
ARRAYS_FILE = "arrays.npz"


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(s, s + n)`` for every pair, without a Python loop.

    Example: starts [10, 3], lengths [2, 3] -> [10, 11, 3, 4, 5].

    Shapes: starts [m], lengths [m] -> [lengths.sum()].
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) and int(lengths.min()) < 0:
        raise ValueError("ranges() got a negative length")
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # Position inside each run = global position - start position of its run.
    run_start = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + (np.arange(total, dtype=np.int64) - run_start)


@dataclass(frozen=True)
class Csr:
    """A ragged list of int arrays: row r = ``values[offsets[r]:offsets[r + 1]]``.

    Shapes: values [nnz], offsets [n_rows + 1].
    """

    values: np.ndarray
    offsets: np.ndarray

    @property
    def n_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, r: int) -> np.ndarray:
        return self.values[self.offsets[r] : self.offsets[r + 1]]

    def row_ids(self) -> np.ndarray:
        """Row index of every value. Shape [nnz]."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), self.lengths)


@dataclass(frozen=True)
class Histories:
    """The histories of a batch of (user, n_history) instances.

    ``baskets`` is a Csr over all history baskets of all instances; ``basket_offsets`` says which
    baskets belong to which instance: instance i has baskets
    ``basket_offsets[i] .. basket_offsets[i + 1] - 1`` of ``baskets``.
    """

    baskets: Csr
    basket_offsets: np.ndarray

    @property
    def n(self) -> int:
        return len(self.basket_offsets) - 1

    def items_per_instance(self) -> Csr:
        """All history items of each instance, basket after basket (duplicates kept)."""
        return Csr(self.baskets.values, self.baskets.offsets[self.basket_offsets])


@dataclass(frozen=True)
class BasketData:
    """Customers' basket sequences in flat arrays; see the module docstring for the layout.

    Shapes: items [n_entries] int32, basket_offsets [n_baskets + 1] int64,
    user_offsets [n_users + 1] int64, basket_times [n_baskets] int64 (ns since epoch, or NO_TIME),
    user_ids [n_users] str, item_ids [n_items] str, user_part [n_users] int8 (index into PARTS,
    -1 = no predefined part). ``catalogue``: the items' categorical features, aligned with
    item_ids (``prepare --items``; :mod:`basketgnn.data.catalogue`), or None.
    """

    items: np.ndarray
    basket_offsets: np.ndarray
    user_offsets: np.ndarray
    basket_times: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray
    user_part: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    catalogue: ItemCatalogue | None = None

    @property
    def n_users(self) -> int:
        return len(self.user_offsets) - 1

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_baskets(self) -> int:
        return len(self.basket_offsets) - 1

    @property
    def n_baskets_per_user(self) -> np.ndarray:
        """Shape [n_users]."""
        return np.diff(self.user_offsets)

    @property
    def has_predefined_split(self) -> bool:
        return bool((self.user_part >= 0).any())

    def baskets(self) -> Csr:
        return Csr(self.items, self.basket_offsets)

    def user_baskets(self, u: int) -> list[np.ndarray]:
        """User u's baskets as a list of item-index arrays (for inspection, not hot paths)."""
        b = self.baskets()
        return [b.row(i) for i in range(self.user_offsets[u], self.user_offsets[u + 1])]

    def histories(
        self, users: np.ndarray, n_history: np.ndarray, first: np.ndarray | None = None
    ) -> Histories:
        """The first ``n_history[i]`` baskets of user ``users[i]``, for every i; with ``first``,
        ``n_history[i]`` baskets from the user's basket number ``first[i]`` on.

        Shapes: users [n], n_history [n], first [n].
        """
        n_history = np.asarray(n_history, dtype=np.int64)
        starts = self.user_offsets[users] + (0 if first is None else np.asarray(first, dtype=np.int64))
        basket_idx = ranges(starts, n_history)  # [sum(n_history)]
        return Histories(self._select_baskets(basket_idx), _offsets(n_history))

    def targets(self, users: np.ndarray, n_history: np.ndarray) -> Csr:
        """Basket number ``n_history[i]`` of user ``users[i]`` (the one after the history)."""
        return self._select_baskets(self.user_offsets[users] + np.asarray(n_history))

    def _select_baskets(self, basket_idx: np.ndarray) -> Csr:
        starts = self.basket_offsets[basket_idx]
        lengths = self.basket_offsets[basket_idx + 1] - starts
        return Csr(self.items[ranges(starts, lengths)], _offsets(lengths))

    def aligned_to(self, item_ids: np.ndarray) -> tuple[BasketData, int]:
        """The same baskets with items renumbered to another catalogue ``item_ids`` (by original
        id); items unknown there are dropped, and baskets left empty with them. An item
        catalogue does not follow the renumbering: the result has none.

        Returns (aligned data, number of dropped basket entries).
        """
        if len(item_ids) == len(self.item_ids) and np.array_equal(item_ids, self.item_ids):
            return self, 0
        lookup = {str(k): i for i, k in enumerate(np.asarray(item_ids).tolist())}
        mapping = np.asarray([lookup.get(str(k), -1) for k in self.item_ids.tolist()], np.int64)
        new = mapping[self.items]  # [n_entries], -1 = unknown
        known = new >= 0
        basket_of = self.baskets().row_ids()
        basket_len = np.bincount(basket_of[known], minlength=self.n_baskets)
        keep_basket = basket_len > 0
        user_of_basket = np.repeat(np.arange(self.n_users), self.n_baskets_per_user)
        aligned = BasketData(
            items=new[known].astype(np.int32),
            basket_offsets=_offsets(basket_len[keep_basket]),
            user_offsets=_offsets(np.bincount(user_of_basket[keep_basket], minlength=self.n_users)),
            basket_times=self.basket_times[keep_basket],
            user_ids=self.user_ids,
            item_ids=np.asarray(item_ids).astype(str),
            user_part=self.user_part,
            meta={k: v for k, v in self.meta.items() if k != "catalogue"},
        )
        return aligned, int((~known).sum())

    def user_index(self) -> dict[str, int]:
        """Original customer id -> user index."""
        return {str(k): i for i, k in enumerate(self.user_ids.tolist())}

    def validate(self) -> None:
        """Check the invariants of the layout; raises ValueError naming the broken one."""
        checks = {
            "basket_offsets starts at 0 and ends at len(items)": self.basket_offsets[0] == 0
            and self.basket_offsets[-1] == len(self.items),
            "user_offsets starts at 0 and ends at n_baskets": self.user_offsets[0] == 0
            and self.user_offsets[-1] == self.n_baskets,
            "offsets are non-decreasing": bool(
                (np.diff(self.basket_offsets) >= 0).all() and (np.diff(self.user_offsets) >= 0).all()
            ),
            "item indices are in range": len(self.items) == 0
            or (int(self.items.min()) >= 0 and int(self.items.max()) < self.n_items),
            "one time per basket": len(self.basket_times) == self.n_baskets,
            "one part code per user": len(self.user_part) == self.n_users,
            "one catalogue row per item": self.catalogue is None
            or self.catalogue.codes.shape == (self.n_items, len(self.catalogue.columns)),
        }
        broken = [name for name, ok in checks.items() if not ok]
        if broken:
            raise ValueError(f"invalid BasketData: {', '.join(broken)} does not hold")

    def save(self, path: str | Path) -> None:
        """Write the dataset folder atomically (a crash leaves any earlier folder intact).

        An existing folder is replaced only when it is empty or a prepared dataset, never a
        folder holding anything else. Arrays are copied a block at a time, so saving data that
        is itself memory-mapped costs no more memory than a block.
        """
        path = Path(path)
        check_replaceable(path)
        with atomic_path(path, directory=True) as tmp:
            with ArraysWriter(tmp / ARRAYS_FILE) as w:
                for name, values in self.arrays().items():
                    w.whole(name, values)
            self.save_meta(tmp)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays ``arrays.npz`` holds, by name, in file order (ids as unicode text)."""
        return {
            "items": self.items,
            "basket_offsets": self.basket_offsets,
            "user_offsets": self.user_offsets,
            "basket_times": self.basket_times,
            "user_ids": _text(self.user_ids),
            "item_ids": _text(self.item_ids),
            "user_part": self.user_part,
        }

    def save_meta(self, folder: str | Path) -> None:
        """Write ``meta.json`` (format, counts, ``self.meta``) into ``folder``, and the item
        catalogue's ``catalogue.npz`` when the data has one."""
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "n_users": self.n_users,
            "n_items": self.n_items,
            "n_baskets": self.n_baskets,
            "n_entries": len(self.items),
            **{k: v for k, v in self.meta.items() if k not in {"format", "version"}},
        }
        if self.catalogue is not None:
            np.savez(Path(folder) / "catalogue.npz", **self.catalogue.arrays())
        (Path(folder) / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, mmap: bool = True) -> BasketData:
        """Load a folder written by :meth:`save`, memory-mapped (``mmap``, the default: the
        arrays are read-only views of the file) or read into memory."""
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            raise UserError(
                f"{path} is not a prepared dataset (no meta.json inside). "
                "Create one with `basketgnn prepare`, or pass a DNNTSP .json file."
            )
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != FORMAT_NAME or meta.get("version") != FORMAT_VERSION:
            raise UserError(
                f"{meta_path}: format {meta.get('format')!r} version {meta.get('version')!r} is not "
                f"{FORMAT_NAME!r} version {FORMAT_VERSION}; prepare the data again."
            )
        catalogue = None
        if meta.get("catalogue"):
            with np.load(path / "catalogue.npz", allow_pickle=False) as z:
                catalogue = ItemCatalogue.from_arrays(meta["catalogue"]["columns"], z)
        data = cls(meta=meta, catalogue=catalogue, **load_arrays(path / ARRAYS_FILE, mmap=mmap))
        data.validate()
        return data


def check_replaceable(path: Path) -> None:
    """Raise unless ``path`` is absent, an empty folder or a prepared dataset (what
    :meth:`BasketData.save` may replace)."""
    if path.exists() and (
        not path.is_dir() or (any(path.iterdir()) and not (path / "meta.json").is_file())
    ):
        raise UserError(
            f"{path} exists and is not a prepared dataset; refusing to replace it. "
            "Choose a new or empty folder for --out."
        )


def _text(ids: np.ndarray) -> np.ndarray:
    """Ids as a numpy unicode array (no copy when they already are one)."""
    ids = np.asarray(ids)
    return ids if ids.dtype.kind == "U" else ids.astype(str)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def from_sequences(
    sequences: list[list[list[int]]],
    n_items: int | None = None,
    user_part: np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
) -> BasketData:
    """Build a BasketData from nested lists (users -> baskets -> item indices).

    Items inside a basket are de-duplicated and sorted; empty baskets are dropped. Meant for
    small data (tests, JSON import); logs go through :mod:`basketgnn.data.ingest`.
    """
    flat: list[int] = []
    basket_len: list[int] = []
    user_len: list[int] = []
    for baskets in sequences:
        kept = 0
        for basket in baskets:
            uniq = sorted(set(int(i) for i in basket))
            if uniq:
                flat.extend(uniq)
                basket_len.append(len(uniq))
                kept += 1
        user_len.append(kept)
    items = np.asarray(flat, dtype=np.int32)
    if n_items is None:
        n_items = int(items.max()) + 1 if len(items) else 0
    n_users = len(sequences)
    return BasketData(
        items=items,
        basket_offsets=_offsets(np.asarray(basket_len, dtype=np.int64)),
        user_offsets=_offsets(np.asarray(user_len, dtype=np.int64)),
        basket_times=np.full(len(basket_len), NO_TIME, dtype=np.int64),
        user_ids=np.asarray([str(u) for u in range(n_users)]),
        item_ids=np.asarray([str(i) for i in range(n_items)]),
        user_part=np.full(n_users, -1, dtype=np.int8) if user_part is None else user_part,
        meta=meta or {},
    )
