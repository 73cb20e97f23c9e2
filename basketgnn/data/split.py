"""Which (user, history length) instances train, validate and test a model.

An *instance* is a user u and a history length h: the history is u's first h baskets and the
target is basket h (0-based). Every split is three sets of instances:

- ``predefined``: the parts stored with an imported DNNTSP file; each user's target is their last
  basket (h = n_u - 1) in whichever part the user belongs to.
- ``random``: users are shuffled with a seed and cut into train/validate/test fractions; targets
  as above. The assignment is saved to a JSON file (original customer ids) for reuse.
- ``temporal``: leave-last-basket-out for every customer: test h = n_u - 1, validate
  h = n_u - 2, train h = n_u - 3 (a part includes only users with h >= 1).

For model fitting, a training instance (u, h) makes baskets 0..h of u visible (history + target).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from basketgnn.data.arrays_file import ArraysWriter, load_arrays
from basketgnn.data.dataset import PARTS, BasketData, ranges
from basketgnn.errors import UserError
from basketgnn.io_utils import atomic_path, write_json


@dataclass(frozen=True)
class Instances:
    """Shapes: users [n] int64, n_history [n] int64 (>= 1)."""

    users: np.ndarray
    n_history: np.ndarray

    def __len__(self) -> int:
        return len(self.users)


@dataclass(frozen=True)
class Split:
    name: str
    """How the split was made, recorded with every result (e.g. ``random(seed=0, fractions=0.8/0.1/0.1)``)."""
    parts: dict[str, Instances]

    def __getitem__(self, part: str) -> Instances:
        if part not in self.parts:
            raise UserError(f"Unknown split part {part!r}; choose one of {', '.join(self.parts)}.")
        return self.parts[part]


def prefix_instances(instances: Instances) -> Instances:
    """Every shorter history of each instance too: (u, h) -> (u, 1), (u, 2), ..., (u, h).

    For training, (u, h) makes baskets 0..h visible, so each prefix's target is visible as well.
    """
    h = np.asarray(instances.n_history, dtype=np.int64)
    return Instances(np.repeat(instances.users, h), ranges(np.ones(len(h), np.int64), h))


def _last_basket_instances(data: BasketData, users: np.ndarray) -> Instances:
    """Each user's last basket as target; users with fewer than 2 baskets (possible after
    aligning data to another catalogue) have no history and are left out."""
    users = np.asarray(users, dtype=np.int64)
    users = users[data.n_baskets_per_user[users] >= 2]
    return Instances(users, data.n_baskets_per_user[users] - 1)


def predefined_split(data: BasketData) -> Split:
    if not data.has_predefined_split:
        raise UserError(
            "This dataset has no predefined split (only imported DNNTSP files have one); "
            "use --split-kind temporal or random."
        )
    parts = {
        p: _last_basket_instances(data, np.flatnonzero(data.user_part == code))
        for code, p in enumerate(PARTS)
    }
    return Split("predefined", parts)


def random_user_split(
    data: BasketData, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0
) -> Split:
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise UserError(f"Split fractions must be three non-negative numbers summing to 1, got {fractions}.")
    perm = np.random.default_rng(seed).permutation(data.n_users)
    n_train = int(round(fractions[0] * data.n_users))
    n_val = int(round(fractions[1] * data.n_users))
    chunks = (perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :])
    parts = {p: _last_basket_instances(data, np.sort(c)) for p, c in zip(PARTS, chunks)}
    return Split(f"random(seed={seed}, fractions={'/'.join(f'{f:g}' for f in fractions)})", parts)


def temporal_split(data: BasketData) -> Split:
    n = data.n_baskets_per_user.astype(np.int64)
    parts = {}
    for back, p in ((3, "train"), (2, "validate"), (1, "test")):
        users = np.flatnonzero(n - back >= 1)
        parts[p] = Instances(users.astype(np.int64), n[users] - back)
    return Split("temporal(leave-last-basket-out)", parts)


#: Customers per block when a split is written or read as arrays.
_BLOCK = 1 << 20


def save_split(split: Split, data: BasketData, path: str | Path) -> None:
    """Save a user split as original customer ids per part, atomically: JSON, or with a
    ``.npz`` path arrays (:func:`save_split_arrays`)."""
    if Path(path).suffix == ".npz":
        save_split_arrays(split, data, path)
        return
    write_json(
        path,
        {
            "name": split.name,
            "parts": {p: data.user_ids[inst.users].tolist() for p, inst in split.parts.items()},
            "n_history": {p: inst.n_history.tolist() for p, inst in split.parts.items()},
        },
    )


def save_split_arrays(split: Split, data: BasketData, path: str | Path) -> None:
    """The split as an ``.npz`` of arrays, written a block of customers at a time: ``name``,
    ``parts`` (the part names), and per part ``P.customer_ids`` (original ids) and
    ``P.n_history``. What :func:`save_split` writes as JSON, in a form whose memory does not
    grow with the number of customers (JSON text and Python strings for millions do).
    """
    ids = np.asarray(data.user_ids)
    if ids.dtype.kind != "U":
        ids = ids.astype(str)
    with atomic_path(path) as tmp, ArraysWriter(tmp) as w:
        w.whole("name", np.asarray(split.name))
        w.whole("parts", np.asarray(list(split.parts), dtype=str))
        for p, inst in split.parts.items():
            n = len(inst)
            with w.array(f"{p}.customer_ids", ids.dtype, n) as put:
                for start in range(0, n, _BLOCK):
                    put(ids[inst.users[start : start + _BLOCK]])
            w.whole(f"{p}.n_history", np.asarray(inst.n_history, dtype=np.int64))


def load_split(path: str | Path, data: BasketData) -> Split:
    """Load a split saved by :func:`save_split`; customers unknown to ``data`` are an error."""
    path = Path(path)
    if path.suffix == ".npz":
        return load_split_arrays(path, data)
    try:
        raw = json.loads(path.read_text())
        index = data.user_index()
        parts = {}
        for p, ids in raw["parts"].items():
            missing = [i for i in ids if i not in index]
            if missing:
                raise UserError(
                    f"{path}: part {p!r} names {len(missing)} customer(s) not in the dataset, "
                    f"e.g. {missing[0]!r}; the split was made for other data. Make a new split."
                )
            inst = Instances(
                np.asarray([index[i] for i in ids], dtype=np.int64),
                np.asarray(raw["n_history"][p], dtype=np.int64),
            )
            n = data.n_baskets_per_user[inst.users]
            bad = np.flatnonzero((inst.n_history < 1) | (inst.n_history >= n))
            if len(bad):
                u = ids[bad[0]]
                raise UserError(
                    f"{path}: part {p!r} asks for a history of {inst.n_history[bad[0]]} baskets "
                    f"of customer {u!r}, who has {n[bad[0]]} in this data ({len(bad)} such "
                    "customers); the split was made for other data. Make a new split."
                )
            parts[p] = inst
        return Split(str(raw["name"]), parts)
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a split file written by basketgnn ({e!r}).") from None


def load_split_arrays(path: Path, data: BasketData) -> Split:
    """Load a split written by :func:`save_split_arrays` (memory-mapped), its customer ids
    looked up a block at a time; customers unknown to ``data`` are an error."""
    try:
        arrays = load_arrays(path)
        parts = {
            p: Instances(_user_indices(path, p, arrays[f"{p}.customer_ids"], data),
                         np.array(arrays[f"{p}.n_history"], dtype=np.int64))
            for p in arrays["parts"].tolist()
        }  # fmt: skip
        name = str(arrays["name"])
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise UserError(f"{path}: not a split file written by basketgnn ({e!r}).") from None
    for p, inst in parts.items():
        n = data.n_baskets_per_user[inst.users]
        bad = np.flatnonzero((inst.n_history < 1) | (inst.n_history >= n))
        if len(bad):
            raise UserError(
                f"{path}: part {p!r} asks for a history of {inst.n_history[bad[0]]} baskets "
                f"of customer {data.user_ids[inst.users[bad[0]]]!r}, who has {n[bad[0]]} in "
                f"this data ({len(bad)} such customers); the split was made for other data. "
                "Make a new split."
            )
    return Split(name, parts)


def _user_indices(path: Path, part: str, ids: np.ndarray, data: BasketData) -> np.ndarray:
    """The user index of every id of ``ids`` in ``data`` (binary search when the data's ids are
    sorted, as prepared logs' are; else a dictionary). Shapes: ids [n] -> [n] int64."""
    known = np.asarray(data.user_ids)
    ordered = len(known) < 2 or bool((known[1:] >= known[:-1]).all())
    index = None if ordered else data.user_index()
    out = np.empty(len(ids), dtype=np.int64)
    for start in range(0, len(ids), _BLOCK):
        block = np.asarray(ids[start : start + _BLOCK])
        if index is None:
            pos = np.minimum(np.searchsorted(known, block), len(known) - 1)
            found = known[pos] == block
        else:
            pos = np.asarray([index.get(i, -1) for i in block.tolist()], dtype=np.int64)
            found = pos >= 0
        if not found.all():
            missing = block[np.flatnonzero(~found)]
            raise UserError(
                f"{path}: part {part!r} names customer(s) not in the dataset, e.g. "
                f"{str(missing[0])!r} ({len(missing)} in one block of {len(block):,}); the split "
                "was made for other data. Make a new split."
            )
        out[start : start + len(block)] = pos
    return out


def make_split(data: BasketData, spec: str = "auto", seed: int = 0) -> Split:
    """Resolve a split spec: ``auto`` (predefined if the data has one, else temporal),
    ``predefined``, ``temporal``, ``random``, or the path of a saved split JSON file."""
    if spec == "auto":
        spec = "predefined" if data.has_predefined_split else "temporal"
    if spec == "predefined":
        split = predefined_split(data)
    elif spec == "temporal":
        split = temporal_split(data)
    elif spec == "random":
        split = random_user_split(data, seed=seed)
    elif spec.endswith((".json", ".npz")):
        split = load_split(spec, data)
    else:
        raise UserError(
            f"Unknown split {spec!r}: use auto, predefined, temporal, random, or a split .json file."
        )
    empty = [p for p, inst in split.parts.items() if len(inst) == 0]
    if empty:
        raise UserError(
            f"The {split.name} split leaves no instance in {', '.join(empty)}: too few customers "
            "or baskets per customer (temporal needs 2 baskets for test, 3 for validate and 4 for "
            "train). Use more data or another split."
        )
    return split
