"""Top-k recommendations for every customer, in original ids, streamed chunk by chunk.

Rows are (customer_id, item_id, rank, score). They are made a chunk of customers at a time as
pyarrow tables whose id columns are taken from the id arrays (``take``), never built as Python
strings, and written as they come: memory holds one chunk, never all rows.

Two outputs, one code path (:func:`iter_recommendations` -> :func:`basketgnn.io_utils.write_table_stream`):

- one file, ``recs.parquet`` or ``recs.csv`` (:func:`write_recommendation_file`), for small data;
- a partitioned Parquet dataset (:func:`write_recommendation_parts`): ``DIR/part-XXXXX.parquet``
  plus ``DIR/_manifest.json``, written by one process or by several shards, or by the actors of
  :mod:`~basketgnn.workflow.ray_scoring`. Every writer runs the same steps:
  :func:`plan_parts` (the part list and the run key), :func:`start_parts` (what a killed run
  left is cleared, complete parts are kept), :func:`write_part` for each part to write, and
  :func:`finish_parts` (the manifests).

**Partition.** Customers are numbered 0..U-1 in the prepared dataset's order. Part p holds
customers [p·chunk, (p+1)·chunk); with P = ceil(U / chunk) parts, shard i of n writes the
contiguous run of parts [⌊i·P/n⌋, ⌊(i+1)·P/n⌋). Part names are global, so n shards writing into
one folder produce exactly the files one process writes with the same chunk, and the union of
their rows is that process's output, bit for bit. (With another chunk the model scores other
batches together, and DNNTSP's scores may then differ in the last float bits.)

**Crash and rerun.** Each part is written under a temporary name (``.part-…tmp``, hidden from
DuckDB's ``part-*`` glob and from Spark) and renamed when complete, so a killed run leaves only
complete parts. Every part records a run key (model source, data, k, chunk) in its Parquet
footer: a rerun skips the parts whose key matches and rewrites the others, so it resumes where
a crash stopped and never mixes two runs.

**Manifest.** ``_manifest.json`` (parts, rows per part, customers, k, source, created) is
written last and atomically, only when every part of every shard is complete; its presence
says the dataset is whole. With n > 1 shards each shard first writes
``_manifest.shard-XXXXX-of-YYYYY.json``; whichever shard finds all n of them (same run key)
merges them into ``_manifest.json``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.engine.threads import kept_helpers
from basketgnn.errors import UserError
from basketgnn.fingerprint import data_fingerprint, settings_hash
from basketgnn.io_utils import atomic_path, part_index, part_path, write_json, write_table_stream
from basketgnn.recommenders.base import Recommender, rank_items
from basketgnn.recommenders.reasons import explain

#: The columns of every recommendation output.
SCHEMA = pa.schema(
    [("customer_id", pa.string()), ("item_id", pa.string()), ("rank", pa.int32()), ("score", pa.float32())]
)
#: The columns with ``reasons``: each row's reasons as JSON text (``recommenders.reasons``).
SCHEMA_WITH_REASONS = SCHEMA.append(pa.field("reasons", pa.string()))
#: Customers per part (and per streamed chunk) unless told otherwise: 2M rows at k = 20.
DEFAULT_CHUNK = 100_000
#: Written last into a complete partitioned dataset.
MANIFEST = "_manifest.json"
MANIFEST_FORMAT = "basketgnn.recommendations/1"
#: Parquet footer key holding a part's run key.
RUN_KEY_FIELD = "basketgnn.run_key"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0 <= index < count): which parts one process writes."""

    index: int = 0
    count: int = 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"i/n"`` -> Shard(i, n); anything else is a :class:`UserError` saying the form."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if m is not None and 0 <= int(m[1]) < int(m[2]):
            return cls(int(m[1]), int(m[2]))
        raise UserError(
            f"--shard {text!r}: expected i/n, shard i of n counted from 0 (0 <= i < n), "
            "e.g. --shard 0/4, 1/4, 2/4 and 3/4 for four shards."
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Shard | None:
        """The shard of this rank under torchrun (RANK of WORLD_SIZE); None outside torchrun."""
        if "WORLD_SIZE" not in env:
            return None
        text = f"{env.get('RANK', '0')}/{env['WORLD_SIZE']}"
        try:
            return cls.parse(text)
        except UserError:
            raise UserError(
                f"the environment says RANK={env.get('RANK')!r} WORLD_SIZE={env['WORLD_SIZE']!r}, "
                "which is not a shard i/n with 0 <= i < n; unset them or pass --shard i/n."
            ) from None

    def parts(self, n_parts: int) -> range:
        """This shard's part indices: a contiguous run, [⌊i·P/n⌋, ⌊(i+1)·P/n⌋)."""
        return range(self.index * n_parts // self.count, (self.index + 1) * n_parts // self.count)


@dataclass(frozen=True)
class PartInfo:
    """One part of a partitioned dataset: customers [first_customer, first_customer + customers)."""

    file: str
    rows: int
    customers: int
    first_customer: int


@dataclass(frozen=True)
class PartsWritten:
    """What :func:`write_recommendation_parts` did; ``manifest`` is set when the whole dataset
    (every shard) is complete."""

    folder: Path
    shard: Shard
    parts: list[PartInfo]
    written: int
    skipped: int
    manifest: Path | None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def customers(self) -> int:
        return sum(p.customers for p in self.parts)


def recommendation_table(
    users: np.ndarray, items: np.ndarray, scores: np.ndarray, user_ids: pa.Array, item_ids: pa.Array
) -> pa.Table:
    """Rows of ``users``' top-k, best first, ids taken from the id arrays (no Python strings).

    Shapes: users [n] int64, items [n, k] int64, scores [n, k]; user_ids [U], item_ids [I]
    -> table of n·k rows in :data:`SCHEMA`.
    """
    n, k = items.shape
    return pa.table(
        {
            "customer_id": user_ids.take(pa.array(np.repeat(users, k))),
            "item_id": item_ids.take(pa.array(items.ravel())),
            "rank": pa.array(np.tile(np.arange(1, k + 1, dtype=np.int32), n)),
            "score": pa.array(scores.ravel().astype(np.float32, copy=False)),
        },
        schema=SCHEMA,
    )


def iter_recommendations(
    model: Recommender,
    data: BasketData,
    k: int,
    users: np.ndarray | None = None,
    chunk: int = DEFAULT_CHUNK,
    reasons: bool = False,
) -> Iterator[pa.Table]:
    """Each chunk of ``users``' (default: every customer's) top k from the full history, as one
    table per ``chunk`` customers; with ``reasons``, a column of each row's reasons as JSON text
    (:data:`SCHEMA_WITH_REASONS`)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    users = np.arange(data.n_users, dtype=np.int64) if users is None else np.asarray(users, np.int64)
    n_history = data.n_baskets_per_user.astype(np.int64)
    item_ids = pa.array(np.asarray(data.item_ids).astype(str))
    for start in range(0, len(users), chunk):
        u = users[start : start + chunk]
        inst = Instances(u, n_history[u])
        items, scores = rank_items(model, data, inst, k)
        # The chunk's own ids only: memory is a chunk's, however many customers there are.
        chunk_ids = pa.array(np.asarray(data.user_ids[u]).astype(str))
        table = recommendation_table(np.arange(len(u)), items, scores, chunk_ids, item_ids)
        if reasons:
            why = explain(model, data, inst, items)
            texts = [json.dumps(r, separators=(",", ":")) for row in why for r in row]
            table = table.append_column(SCHEMA_WITH_REASONS.field("reasons"), pa.array(texts, pa.string()))
        yield table


def recommend_all(model: Recommender, data: BasketData, k: int) -> pd.DataFrame:
    """Rows (customer_id, item_id, rank, score): each customer's top k from the full history.

    All rows in memory: for small data (the demo, tests); large outputs stream with
    :func:`write_recommendation_file` or :func:`write_recommendation_parts`.
    """
    return pa.concat_tables(iter_recommendations(model, data, k)).to_pandas()


def write_recommendations(frame: pd.DataFrame, path: str | Path) -> None:
    """Write rows already in memory as Parquet or CSV (by extension), atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.name.endswith(".csv"):
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)


def write_recommendation_file(
    model: Recommender,
    data: BasketData,
    k: int,
    path: str | Path | Sequence[str | Path],
    chunk: int = DEFAULT_CHUNK,
    reasons: bool = False,
) -> int:
    """Every customer's top k into one Parquet or CSV file (by extension), streamed chunk by
    chunk and renamed into place when complete; or into several files from one scoring
    (``path`` a list, e.g. the same rows as .parquet and .csv); ``reasons``: with the reasons
    column. Returns the number of rows."""
    schema = SCHEMA_WITH_REASONS if reasons else SCHEMA
    return write_table_stream(path, iter_recommendations(model, data, k, chunk=chunk, reasons=reasons), schema)


def run_key(data: BasketData, k: int, chunk: int, source: Mapping[str, Any], reasons: bool = False) -> str:
    """sha256 (16 hex digits) of what a part's rows depend on: the model ``source`` (e.g. the
    checkpoint's hash), the data's baskets and ids, k, the chunk size and the reasons column."""
    what = {"source": dict(source), "k": k, "chunk": chunk, "data": data_fingerprint(data)}
    return settings_hash({**what, "reasons": True} if reasons else what, 16)


@dataclass(frozen=True)
class PartPlan:
    """One run of a partitioned dataset (module docstring): what every part shares, so that any
    writer of part p (this process, a shard, an actor of :mod:`~basketgnn.workflow.ray_scoring`)
    writes the same file. Made by :func:`plan_parts`; small and picklable."""

    folder: Path
    k: int
    chunk: int
    n_users: int
    n_items: int
    key: str
    source: dict[str, Any]
    reasons: bool = False

    @property
    def n_parts(self) -> int:
        return -(-self.n_users // self.chunk)

    @property
    def schema(self) -> pa.Schema:
        return SCHEMA_WITH_REASONS if self.reasons else SCHEMA

    def customers(self, p: int) -> range:
        """Part ``p``'s customers: [p·chunk, (p+1)·chunk) within the data."""
        return range(p * self.chunk, min((p + 1) * self.chunk, self.n_users))

    def complete(self, p: int) -> PartInfo | None:
        """Part ``p`` when a complete file of this run is in place, None when it must be written."""
        path = part_path(self.folder, p)
        rows = _complete_rows(path, self.key)
        lo = self.customers(p)
        return None if rows is None else PartInfo(path.name, rows, len(lo), lo.start)

    def check_data(self, data: BasketData) -> None:
        """A :class:`UserError` unless ``data`` is the data this run was planned on (a writer
        that loaded its own copy, e.g. on another machine)."""
        if run_key(data, self.k, self.chunk, self.source, self.reasons) != self.key:
            raise UserError(
                f"the data loaded here differs from the data the run over {self.folder} was planned "
                "on; every machine must read the same checkpoint and data (shared storage)."
            )


def plan_parts(
    data: BasketData,
    k: int,
    folder: str | Path,
    *,
    chunk: int = DEFAULT_CHUNK,
    source: Mapping[str, Any] | None = None,
    reasons: bool = False,
) -> PartPlan:
    """The run of ``data``'s top ``k`` into the dataset ``folder`` (created), parts of
    ``chunk`` customers; ``source`` describes the model (module docstring, "Crash and rerun")."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file; a partitioned output needs a folder (or name a .parquet/.csv file).")
    if chunk < 1:
        raise UserError(f"--chunk {chunk}: must be at least 1 customer per part.")
    folder.mkdir(parents=True, exist_ok=True)
    source = dict(source or {})
    key = run_key(data, k, chunk, source, reasons)
    return PartPlan(folder, k, chunk, data.n_users, data.n_items, key, source, reasons)


def write_part(model: Recommender, data: BasketData, plan: PartPlan, p: int) -> PartInfo:
    """Score and write part ``p`` of ``plan`` (whatever is there), under a temporary name renamed
    into place when complete; the run key goes into its Parquet footer."""
    users = np.asarray(plan.customers(p), dtype=np.int64)
    tables = iter_recommendations(model, data, plan.k, users, chunk=max(len(users), 1), reasons=plan.reasons)
    path = part_path(plan.folder, p)
    rows = write_table_stream(path, tables, plan.schema, metadata={RUN_KEY_FIELD: plan.key})
    return PartInfo(path.name, rows, len(users), p * plan.chunk)


def start_parts(plan: PartPlan, shard: Shard = Shard()) -> list[PartInfo | None]:
    """Before ``shard`` writes its parts: clear what a killed or another run left (see
    :func:`_clear_stale`); returns each of the shard's parts, complete (kept) or None (to write)."""
    mine = shard.parts(plan.n_parts)
    _clear_stale(plan, shard, mine)
    return [plan.complete(p) for p in mine]


def finish_parts(plan: PartPlan, shard: Shard, infos: list[PartInfo]) -> Path | None:
    """After ``shard`` wrote all its parts (``infos``): its manifest, then ``_manifest.json``
    once every shard is complete. Returns that path, None while a shard is missing."""
    record = {
        "format": MANIFEST_FORMAT,
        "run_key": plan.key,
        "k": min(plan.k, plan.n_items),
        "columns": plan.schema.names,
        "chunk": plan.chunk,
        "source": plan.source,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if shard.count == 1:
        write_json(plan.folder / MANIFEST, _manifest(record, plan.n_users, infos, shard_count=1))
        return plan.folder / MANIFEST
    shard_record = {**record, "shard": str(shard), "customers": sum(i.customers for i in infos),
                    "parts": [asdict(i) for i in infos]}  # fmt: skip
    write_json(plan.folder / _shard_manifest_name(shard), shard_record)
    return _merge_shard_manifests(plan.folder, plan.key, shard.count, plan.n_users, record)


def remove_temporaries(plan: PartPlan, parts: Iterable[int]) -> None:
    """Delete the temporary files of ``parts`` that killed writers left (none may be writing)."""
    for p in parts:
        for tmp in plan.folder.glob(f".{part_path(plan.folder, p).name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def write_recommendation_parts(
    model: Recommender,
    data: BasketData,
    k: int,
    folder: str | Path,
    *,
    shard: Shard = Shard(),
    chunk: int = DEFAULT_CHUNK,
    source: Mapping[str, Any] | None = None,
    reasons: bool = False,
) -> PartsWritten:
    """Write ``shard``'s parts of the partitioned dataset in ``folder`` (see the module
    docstring): complete parts of this run are kept, the others (re)written one at a time, then
    the shard's manifest, then ``_manifest.json`` once every shard is complete.

    ``source`` describes the model (e.g. checkpoint path and sha256): it goes into the run key
    and the manifest.
    """
    plan = plan_parts(data, k, folder, chunk=chunk, source=source, reasons=reasons)
    infos: list[PartInfo] = []
    written = 0
    with kept_helpers():  # the parts' ranking calls share their helper threads
        for p, done in zip(shard.parts(plan.n_parts), start_parts(plan, shard)):
            if done is None:
                done = write_part(model, data, plan, p)
                written += 1
            infos.append(done)
    manifest = finish_parts(plan, shard, infos)
    return PartsWritten(plan.folder, shard, infos, written, len(infos) - written, manifest)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The ``_manifest.json`` of a complete partitioned dataset; a :class:`UserError` when it is
    not complete (no manifest yet)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise UserError(f"{path} not found: the dataset is not complete (a shard has not finished).")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def _manifest(record: dict[str, Any], n_users: int, infos: list[PartInfo], shard_count: int) -> dict[str, Any]:
    return {
        **record,
        "shards": shard_count,
        "customers": n_users,
        "rows": sum(i.rows for i in infos),
        "parts": [asdict(i) for i in infos],
    }


def _shard_manifest_name(shard: Shard) -> str:
    return f"_manifest.shard-{shard.index:05d}-of-{shard.count:05d}.json"


def _complete_rows(path: Path, key: str) -> int | None:
    """Rows of an existing part written by this run (same key), None when it must be written."""
    if not path.is_file():
        return None
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return None
    footer = meta.metadata or {}
    if footer.get(RUN_KEY_FIELD.encode()) != key.encode():
        return None
    return int(meta.num_rows)


def _clear_stale(plan: PartPlan, shard: Shard, mine: range) -> None:
    """Before writing: drop a manifest of another run and this shard's own manifest (rewritten
    at the end), temporary files of this shard's parts left by a killed run, and (last shard)
    parts past the end left by a run with more customers or a smaller chunk."""
    manifest = plan.folder / MANIFEST
    if manifest.is_file():
        try:
            stale = json.loads(manifest.read_text()).get("run_key") != plan.key
        except (OSError, ValueError):
            stale = True
        if stale:
            manifest.unlink(missing_ok=True)
    (plan.folder / _shard_manifest_name(shard)).unlink(missing_ok=True)
    remove_temporaries(plan, mine)
    if shard.index == shard.count - 1:
        for path in plan.folder.glob("part-*.parquet"):
            index = part_index(path)
            if index is not None and index >= plan.n_parts:
                path.unlink(missing_ok=True)


def _merge_shard_manifests(
    folder: Path, key: str, count: int, n_users: int, record: dict[str, Any]
) -> Path | None:
    """Write ``_manifest.json`` when all ``count`` shard manifests of run ``key`` are present
    (any shard may do it; the result is the same). Returns its path, or None if a shard is
    missing."""
    infos: list[PartInfo] = []
    for i in range(count):
        path = folder / _shard_manifest_name(Shard(i, count))
        try:
            shard_record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if shard_record.get("run_key") != key:
            return None
        infos.extend(PartInfo(**p) for p in shard_record["parts"])
    write_json(folder / MANIFEST, _manifest(record, n_users, infos, shard_count=count))
    return folder / MANIFEST
