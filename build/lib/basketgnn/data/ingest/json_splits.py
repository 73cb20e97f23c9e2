"""The DNNTSP JSON split files (``{"train"|"validate"|"test": {user: [[item, ...], ...]}}``) ->
:class:`BasketData` with each user's predefined part."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from basketgnn.data.dataset import PARTS, BasketData, from_sequences
from basketgnn.errors import UserError


def read_dnntsp_json(path: str | Path) -> BasketData:
    """Import a DNNTSP split file ``{"train"|"validate"|"test": {user: [[item, ...], ...]}}``.

    Item ids are kept as they are (the file's ids are already 0-based and contiguous), so
    results are comparable with published ones. Each user's part is kept as the predefined split.

    Customer ids are the file's user keys when every key is unique across the three parts (as in
    the published splits). When a key appears in more than one part (the authors' own files number
    each part's users from "user0"), those are different customers: then every customer id of the
    file is ``"<part>:<key>"`` (``"train:user0"``, ``"test:user0"``), unique and the same on every
    run, and ``meta["user_ids_prefixed_with_part"]`` is true. A key repeated within one part is
    an error (JSON keeps only the last, silently).
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(), object_pairs_hook=_unique_keys)
    except _RepeatedKey as e:
        raise UserError(
            f"{path}: the key {e.key!r} appears twice in the same object; a JSON reader would "
            "keep only the last. Give every user of a part its own key."
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot be read as DNNTSP JSON ({e}).") from None
    if not isinstance(raw, dict) or not set(PARTS) <= set(raw):
        raise UserError(
            f"{path}: a DNNTSP file needs the keys {', '.join(PARTS)} at the top level; "
            f"found {', '.join(map(str, raw)) if isinstance(raw, dict) else type(raw).__name__}."
        )
    sequences: list[list[list[int]]] = []
    user_ids: list[str] = []
    parts: list[int] = []
    for code, part in enumerate(PARTS):
        if not isinstance(raw[part], dict):
            raise UserError(f"{path}: {part!r} must map user ids to lists of baskets.")
        for user, baskets in raw[part].items():
            if not isinstance(baskets, list) or not all(
                isinstance(b, list) and all(isinstance(i, int) and i >= 0 for i in b)
                for b in baskets
            ):
                raise UserError(
                    f"{path}: user {user!r} in {part!r} is not a list of baskets of "
                    "non-negative integer item ids."
                )
            sequences.append(baskets)
            user_ids.append(str(user))
            parts.append(code)
    max_item = max((max(b) for s in sequences for b in s if b), default=-1)
    data = from_sequences(sequences, n_items=max_item + 1, user_part=np.asarray(parts, np.int8))
    too_short = np.flatnonzero(data.n_baskets_per_user < 2)
    if len(too_short):
        raise UserError(
            f"{path}: {len(too_short)} user(s) have fewer than 2 non-empty baskets, e.g. "
            f"{user_ids[too_short[0]]!r} in {PARTS[parts[too_short[0]]]!r}; every user needs a "
            "history and a target basket."
        )
    prefixed = len(set(user_ids)) < len(user_ids)
    if prefixed:
        user_ids = [f"{PARTS[p]}:{u}" for p, u in zip(parts, user_ids)]
    return BasketData(
        **{
            **data.__dict__,
            "user_ids": np.asarray(user_ids),
            "meta": {
                "source": str(path),
                "source_kind": "dnntsp-json",
                "user_ids_prefixed_with_part": prefixed,
            },
        }
    )


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` object hook that refuses a key repeated within one object."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out
