"""Next baskets for given customers or histories, in original ids, with the reasons: the one
scoring path of ``basketgnn predict``, ``basketgnn serve`` and ``recommend --reasons``.

A :class:`NextBaskets` holds a trained checkpoint's recommender (``load_trained``) and,
optionally, the prepared data whose customers it can look up. A :class:`Query` asks for one
customer's next basket from

- their stored history (``customer_id``),
- their stored history plus the baskets bought since the data was prepared (``customer_id``
  and ``history``), or
- any history of original item ids (``history`` alone; it belongs to no known customer).

Queries are ranked together by :func:`~basketgnn.recommenders.base.rank_items`, the function
``recommend`` calls: a stored customer's items are those of ``recommend``'s rows. Queries of
stored customers without new baskets are ranked on the stored data itself; the others on a
small dataset built from their baskets. Excluded items (the query's own and a blocked-items
file, :class:`BlockedItems`) are left out by ranking k + (number excluded) items and dropping
them, which is the top k of the rest.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from basketgnn.data.dataset import NO_TIME, BasketData, from_sequences
from basketgnn.data.split import Instances
from basketgnn.errors import UserError
from basketgnn.io_utils import file_sha256
from basketgnn.recommenders.base import rank_items
from basketgnn.recommenders.reasons import explain

#: Customer id of a history that belongs to no known customer (never a real id: it holds a NUL).
TYPED_HISTORY_ID = "\x00typed-history"
#: Unknown item ids named in one warning (the count is always given).
WARN_IDS = 10


@dataclass(frozen=True)
class Query:
    """One next-basket question: a stored customer, new baskets (oldest first), or both."""

    customer_id: str | None = None
    history: Sequence[Sequence[str]] | None = None
    k: int = 10
    exclude: Sequence[str] = ()
    #: Reported as the answer's customer id for a history alone (never looked up).
    label: str | None = None


@dataclass
class Answer:
    """A query's next basket: ``items`` best first, each {"item_id", "rank", "score"} plus
    "reasons" when asked for; ``warnings`` says what of the query was ignored."""

    customer_id: str | None
    items: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    n_history: int = 0


class UnknownCustomer(UserError):
    """A customer id the data does not hold."""


class BlockedItems:
    """Item ids that may not be recommended (discontinued, out of stock), read from a text file
    with one id per line (``#`` starts a comment; a first line ``item_id`` is a header) and read
    again whenever the file changes. A file that cannot be read keeps the last list in force."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._ids: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self.error: str | None = None
        if not self.path.is_file():
            raise UserError(f"{self.path}: no such blocked-items file (one item id per line).")
        self.current()

    def current(self) -> frozenset[str]:
        """The blocked ids, read again if the file changed since the last call."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            self.error = f"{self.path}: {e.strerror}; the last list read stays in force"
            return self._ids
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._ids = self._read()
                    self._stamp = stamp
        return self._ids

    def _read(self) -> frozenset[str]:
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            self.error = f"{self.path}: cannot be read ({e}); the last list read stays in force"
            return self._ids
        ids = [line.split("#", 1)[0].strip() for line in lines]
        if ids and ids[0] == "item_id":
            ids = ids[1:]
        self.error = None
        return frozenset(i for i in ids if i)


class NextBaskets:
    """A trained recommender answering :class:`Query` lists (module docstring).

    Args:
        recommender: what ``load_trained`` returns.
        data: the prepared data aligned to its catalogue (None: only histories are answered).
        checkpoint: the checkpoint's path (its sha256 is reported with every answer).
        blocked: items never recommended.
    """

    def __init__(
        self, recommender: Any, data: BasketData | None, checkpoint: str | Path, blocked: BlockedItems | None = None
    ) -> None:
        self.recommender = recommender
        self.data = data
        self.checkpoint = Path(checkpoint)
        self.checkpoint_sha256 = file_sha256(checkpoint)
        self.model = str(recommender.name)
        self.blocked = blocked
        self.item_ids = np.asarray(recommender.item_ids).astype(str)
        self._item_index = {i: n for n, i in enumerate(self.item_ids.tolist())}
        if data is not None:
            ids = np.asarray(data.user_ids).astype(str)
            self._order = np.argsort(ids, kind="stable")
            self._sorted_ids = ids[self._order]

    @classmethod
    def load(
        cls, checkpoint: str | Path, data: str | Path | None = None, device: str | None = None, *,
        use_data: bool = True, blocked: BlockedItems | None = None,
    ) -> NextBaskets:  # fmt: skip
        """The checkpoint's recommender with ``data`` (default: the data the checkpoint records,
        when ``use_data``) aligned to its catalogue."""
        from basketgnn.data.ingest import load_data
        from basketgnn.workflow.training import load_trained

        rec = load_trained(checkpoint, device)
        dataset = None
        if data is None and use_data:
            data = rec.checkpoint.get("data")
            if data is not None and not Path(data).exists():
                raise UserError(f"{checkpoint} records its data at {data}, which is gone; pass --data.")
        if data is not None:
            dataset, _ = load_data(data).aligned_to(rec.item_ids)
        return cls(rec, dataset, checkpoint, blocked)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def customer_row(self, customer_id: str) -> int | None:
        """The row of ``customer_id`` in the data, None when absent."""
        if self.data is None or len(self._sorted_ids) == 0:
            return None
        pos = int(np.searchsorted(self._sorted_ids, customer_id))
        if pos < len(self._sorted_ids) and self._sorted_ids[pos] == customer_id:
            return int(self._order[pos])
        return None

    def stored_history(self, customer_id: str, last: int | None = None) -> list[dict[str, Any]]:
        """A stored customer's baskets, oldest first: {"items": [ids], "time": ISO or None}."""
        u = self._require(customer_id)
        assert self.data is not None
        lo, hi = int(self.data.user_offsets[u]), int(self.data.user_offsets[u + 1])
        if last is not None:
            lo = max(lo, hi - last)
        out = []
        for b in range(lo, hi):
            items = self.data.items[self.data.basket_offsets[b] : self.data.basket_offsets[b + 1]]
            t = int(self.data.basket_times[b])
            time = None if t == NO_TIME else str(np.datetime64(t, "ns").astype("datetime64[s]"))
            out.append({"items": self.item_ids[items].tolist(), "time": time})
        return out

    def _require(self, customer_id: str) -> int:
        u = self.customer_row(customer_id)
        if u is None:
            where = "the served data" if self.data is not None else "any data (none is loaded)"
            hint = ""
            if self.data is not None and self.data.meta.get("user_ids_prefixed_with_part"):  # read_dnntsp_json
                hint = (f" This DNNTSP file repeats user keys across its parts, so its ids are "
                        f"'<part>:<key>', e.g. {str(self.data.user_ids[0])!r}.")  # fmt: skip
            raise UnknownCustomer(
                f"customer {customer_id!r} is not in {where}; check the id, or send their baskets as a "
                f"history instead.{hint}"
            )
        return u

    def answer(self, queries: Sequence[Query], reasons: bool = True) -> list[Answer]:
        """Each query's next basket (module docstring), in the queries' order."""
        blocked = self.blocked.current() if self.blocked is not None else frozenset()
        stored, built, answers = [], [], [None] * len(queries)
        rows = [self._require(q.customer_id) if q.customer_id is not None else None for q in queries]
        for n, (q, u) in enumerate(zip(queries, rows)):
            (stored if q.history is None and u is not None else built).append(n)
        if stored:
            assert self.data is not None
            users = np.asarray([rows[n] for n in stored], np.int64)
            inst = Instances(users, self.data.n_baskets_per_user[users].astype(np.int64))
            for n, a in zip(stored, self._rank(self.data, inst, [queries[n] for n in stored], [[]] * len(stored), blocked, reasons)):
                answers[n] = a
        if built:
            data, warnings = self._histories([queries[n] for n in built], [rows[n] for n in built])
            inst = Instances(np.arange(len(built), dtype=np.int64), data.n_baskets_per_user.astype(np.int64))
            for n, a in zip(built, self._rank(data, inst, [queries[n] for n in built], warnings, blocked, reasons)):
                answers[n] = a
        return answers  # type: ignore[return-value]

    def _histories(
        self, queries: Sequence[Query], rows: Sequence[int | None]
    ) -> tuple[BasketData, list[list[str]]]:
        """One dataset over the catalogue: each query's stored baskets (``rows``: its customer's
        row in the data, None for a history alone) then its new ones; unknown item ids are
        dropped and named in the query's warnings."""
        sequences, warnings = [], []
        for q, u in zip(queries, rows):
            seq: list[list[int]] = []
            if u is not None:
                assert self.data is not None
                seq = [b.tolist() for b in self.data.user_baskets(u)]
            unknown: set[str] = set()
            for basket in q.history or []:
                seq.append([self._item_index[i] for i in basket if i in self._item_index])
                unknown.update(i for i in basket if i not in self._item_index)
            sequences.append(seq)
            warnings.append([_unknown_warning("history", unknown)] if unknown else [])
        data = from_sequences(sequences, n_items=self.n_items)
        ids = np.asarray([q.customer_id if q.customer_id is not None else TYPED_HISTORY_ID for q in queries])
        return BasketData(**{**data.__dict__, "item_ids": self.item_ids, "user_ids": ids}), warnings

    def _rank(
        self, data: BasketData, inst: Instances, queries: Sequence[Query], warnings: list[list[str]],
        blocked: frozenset[str], reasons: bool,
    ) -> list[Answer]:  # fmt: skip
        excluded = [{self._item_index[i] for i in (*q.exclude, *blocked) if i in self._item_index} for q in queries]
        wanted = max(q.k + len(e) for q, e in zip(queries, excluded))
        items, scores = rank_items(self.recommender, data, inst, min(wanted, self.n_items))
        # Positions of each query's first k items that are not excluded.
        kept = [[j for j, i in enumerate(row.tolist()) if i not in e][: q.k] for q, e, row in zip(queries, excluded, items)]
        width = max((len(k) for k in kept), default=0)
        chosen = np.array([row[k + [0] * (width - len(k))] for row, k in zip(items, kept)], np.int64).reshape(len(kept), width)
        why = explain(self.recommender, data, inst, chosen) if reasons and width else None
        out = []
        for r, (q, keep) in enumerate(zip(queries, kept)):
            entries = []
            for rank, j in enumerate(keep):
                entry: dict[str, Any] = {"item_id": str(self.item_ids[items[r, j]]), "rank": rank + 1, "score": float(scores[r, j])}
                if why is not None:
                    entry["reasons"] = why[r][rank]
                entries.append(entry)
            w = list(warnings[r])
            unknown = {i for i in q.exclude if i not in self._item_index}
            if unknown:
                w.append(_unknown_warning("exclude", unknown))
            out.append(Answer(q.customer_id if q.customer_id is not None else q.label, entries, w, int(inst.n_history[r])))
        return out


def _unknown_warning(field_name: str, unknown: set[str]) -> str:
    named = ", ".join(sorted(unknown)[:WARN_IDS])
    more = f" and {len(unknown) - WARN_IDS} more" if len(unknown) > WARN_IDS else ""
    return f"{field_name}: {len(unknown)} item id(s) the model does not know were ignored: {named}{more}"

