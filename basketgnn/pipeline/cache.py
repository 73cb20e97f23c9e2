"""The stage cache of a run folder: each stage in its own folder ``RUN_DIR/stages/<stage>-<key12>/``.

A stage's key (:func:`stage_key`) is the sha256 of the stage's name, its settings, the keys of
the stages it reads, and whatever ``extra`` the stage adds (``prepare``: the input files' paths,
sizes and modification times, :func:`input_files`; a warm-started fit: the checkpoint and its
sha256). Keys chain, so a folder's name stands for everything that produced it: changing the
DNNTSP settings gives new ``fit_dnntsp``, ``evaluate``, ``recommend`` and ``report`` folders and
reuses ``prepare`` and ``split``. A stage that records an ``output_hash`` (``prepare``: the
prepared arrays and their description) is read by that hash instead of its key, so a log
rewritten with the same content reruns only ``prepare``.

A stage is done when its folder holds ``_done.json`` (written last, atomically); a run reuses
done stages. A folder without it is what an interrupted run left: a resumable stage (a fit,
which resumes from its per-epoch ``resume.pt``) keeps it, any other stage is cleared and redone.
One run at a time holds a run folder (:func:`exclusive`). The top-level outputs are copied from
the stage folders into the run folder as one set (:func:`publish`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from basketgnn import __version__
from basketgnn.errors import UserError
from basketgnn.fingerprint import settings_hash
from basketgnn.io_utils import publish_files, write_json

#: Part of every stage key: a new value gives every stage a new folder. Raise it when what a
#: stage's folder holds changes meaning.
CACHE_VERSION = 2
DONE_FILE = "_done.json"
LOCK_FILE = ".pipeline.lock"
STAGES_DIR = "stages"


@dataclass(frozen=True)
class Stage:
    """A done stage: its folder and its ``_done.json``."""

    name: str
    key: str
    dir: Path
    info: dict[str, Any]
    """The stage's ``_done.json``: what it computed, its settings and how long it took."""

    @property
    def output_key(self) -> str:
        """What stages reading this one hash: the hash of its output when it records one
        (``prepare`` does, so a log re-exported with the same content reruns nothing else)."""
        return self.info.get("output_hash", self.key)


def stage_key(name: str, settings: Any, deps: list[Stage], extra: dict[str, Any]) -> str:
    """The stage's key: the sha256 (hex) of the cache version, basketgnn's version, the stage's
    name and settings, the output keys of ``deps`` and ``extra`` (:func:`settings_hash`)."""
    payload = {
        "cache_version": CACHE_VERSION,
        "basketgnn": __version__,
        "stage": name,
        "settings": settings,
        "deps": [d.output_key for d in deps],
        **extra,
    }
    return settings_hash(payload)


def stage_dir(run_dir: Path, name: str, key: str) -> Path:
    """The folder of stage ``name`` with key ``key``."""
    return run_dir / STAGES_DIR / f"{name}-{key[:12]}"


Say = Callable[..., None]
"""Where the cache's lines go: ``say(message, style=None)``."""


class StageCache:
    """Runs the stages of one run, in order, reusing the done ones.

    ``records`` lists each stage as it finishes: name, status (``ran``, ``resumed`` or
    ``cached``), folder and seconds; ``current`` names the stage under way.
    """

    def __init__(self, run_dir: Path, n_stages: int, say: Say) -> None:
        self.run_dir = run_dir
        self.n_stages = n_stages
        self.say = say
        self.index = 0
        self.current = "(setup)"
        self.records: list[dict[str, Any]] = []

    def stage(
        self,
        name: str,
        settings: Any,
        deps: list[Stage],
        compute: Callable[[Path], dict[str, Any]],
        *,
        resumable: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> Stage:
        """The stage's folder when done, else ``compute(folder)`` and its ``_done.json``: the
        stage's name, key, settings, the output keys of ``deps``, seconds, ``extra`` and what
        ``compute`` returned. ``resumable``: an unfinished folder is kept for ``compute``."""
        self.index += 1
        self.current = name
        key = stage_key(name, settings, deps, extra or {})
        folder = stage_dir(self.run_dir, name, key)
        label = f"[stage {self.index}/{self.n_stages}] {name}"
        done = folder / DONE_FILE
        if done.is_file():
            info = json.loads(done.read_text())
            self.say(f"{label}: cached ({folder.name})")
            self._record(name, "cached", folder, 0.0)
            return Stage(name, key, folder, info)
        status = self._open(label, folder, resumable)
        t0 = time.perf_counter()
        result = compute(folder)
        seconds = round(time.perf_counter() - t0, 3)
        info = {
            "stage": name,
            "key": key,
            "settings": settings,
            "deps": {d.name: d.output_key for d in deps},
            "seconds": seconds,
            **(extra or {}),
            **result,
        }
        write_json(done, info)
        self.say(f"{label}: done in {seconds:.1f}s", style="green")
        self._record(name, status, folder, seconds)
        return Stage(name, key, folder, info)

    def _open(self, label: str, folder: Path, resumable: bool) -> str:
        """Make the folder of a stage to compute: kept when resumable, else cleared first.
        Returns the stage's status, ``resumed`` or ``ran``."""
        status = "ran"
        if folder.exists() and resumable:
            status = "resumed"
            self.say(f"{label}: resuming the unfinished run in {folder.name}", style="yellow")
        else:
            if folder.exists():
                self.say(f"{label}: clearing what an interrupted run left in {folder.name}")
                shutil.rmtree(folder)
            self.say(f"{label}: running -> {STAGES_DIR}/{folder.name}", style="bold")
        folder.mkdir(parents=True, exist_ok=True)
        return status

    def _record(self, name: str, status: str, folder: Path, seconds: float) -> None:
        self.records.append(
            {"name": name, "status": status, "dir": str(folder), "seconds": seconds}
        )


@contextlib.contextmanager
def exclusive(run_dir: Path) -> Iterator[None]:
    """Only one run at a time per run folder (two would clear each other's unfinished stages)."""
    with open(run_dir / LOCK_FILE, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{run_dir} is in use by another pipeline run; wait for it to finish or set "
                "another run_dir."
            ) from None
        yield


def input_files(path: Path) -> list[list[Any]]:
    """(path, size, mtime) of every input file: part of the prepare stage's key. The input is a
    log (a file or a folder of files), a DNNTSP .json, or a prepared dataset folder."""
    from basketgnn.data.ingest import log_files

    if path.is_file() and path.suffix == ".json":
        files = [path]
    elif path.is_dir() and (path / "meta.json").is_file():
        files = sorted(f for f in path.iterdir() if f.is_file())
    else:
        files = log_files(path)
    return [[str(f.resolve()), (st := f.stat()).st_size, st.st_mtime_ns] for f in files]


def publish(run_dir: Path, files: list[Path]) -> None:
    """Put stage outputs into the run folder as one set (:func:`basketgnn.io_utils.publish_files`:
    hard links to the stage's files, copies across filesystems); identical files are left alone,
    and report charts the set does not hold are deleted."""
    stale = [p.name for p in run_dir.glob("report_*.png")]
    publish_files(run_dir, files, remove=stale)
