"""The partitioned recommendation dataset scored on a Ray cluster: ``basketgnn recommend --ray``.

A thin front end over :mod:`~basketgnn.workflow.recommendations`, which owns the partition: the
driver plans the run (:func:`~basketgnn.workflow.recommendations.plan_parts`: the same part
list and run key as one process), keeps the parts already complete, and hands the others to a
pool of actors. Each actor loads the checkpoint and the data once (:class:`CheckpointLoader`)
and writes one part at a time with
:func:`~basketgnn.workflow.recommendations.write_part`, the one-process writer's code path: a
temporary name renamed into place when complete, so a killed actor leaves no partial part. Ray
restarts an actor that died and retries its part (:data:`RETRIES` times); the driver then removes
the temporaries the dead ones left and writes ``_manifest.json`` last, when every part is there.
The files are those one process writes with the same ``chunk``, bit for bit.

Every actor reads the checkpoint and the data from their paths and writes into the output
folder, so on a cluster of several machines all three must be on storage every node sees, and
basketgnn must be installed on every node. Ray is an optional dependency
(``pip install 'basketgnn[ray]'``), imported only here and only when used.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from basketgnn.data.dataset import BasketData
from basketgnn.errors import UserError
from basketgnn.workflow.recommendations import (
    PartInfo,
    PartPlan,
    PartsWritten,
    Shard,
    finish_parts,
    remove_temporaries,
    start_parts,
    write_part,
)

#: How often Ray restarts an actor that died, and retries the part it was writing.
RETRIES = 3
#: ``--ray`` without an address: start a local cluster (Ray's own word for it).
LOCAL = "local"


def require_ray() -> Any:
    """The ``ray`` module, or a :class:`UserError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray, an optional dependency: pip install 'basketgnn[ray]'") from None
    return ray


@contextlib.contextmanager
def ray_cluster(address: str = LOCAL) -> Iterator[Any]:
    """Connected to Ray for the block: a new local cluster (``address`` "local", shut down
    afterwards), or the cluster at ``address`` ("auto": the one `ray start` made on this
    machine; "HOST:6379"; "ray://HOST:10001"), disconnected afterwards. Already connected (a
    caller's own ``ray.init``): that connection, left as it is. Yields the ``ray`` module."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    try:
        if address == LOCAL:
            ray.init(address=LOCAL, include_dashboard=False, logging_level=logging.WARNING)
        else:
            ray.init(address=address, logging_level=logging.WARNING)
    except ConnectionError as e:
        raise UserError(f"--ray {address}: cannot connect to a Ray cluster there ({e}).") from None
    try:
        yield ray
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class CheckpointLoader:
    """What each actor calls once: the checkpoint's recommender on ``threads`` CPU threads and
    the data aligned to its catalogue (:func:`~basketgnn.workflow.training.load_trained_with_data`,
    the loader of one-process ``recommend``). Paths as every node sees them."""

    checkpoint: str
    data: str
    device: str | None = None
    threads: int = 1

    def __call__(self) -> tuple[Any, BasketData]:
        from basketgnn.workflow.training import load_trained_with_data

        recommender, data, _, _ = load_trained_with_data(self.checkpoint, self.data, self.device)
        return recommender.with_threads(self.threads), data


class PartWriter:
    """A Ray actor's state: the loaded recommender and data; writes the parts it is handed.

    A failure to load is kept and raised by :meth:`write`, so the driver gets it as the part's
    error (a :class:`UserError` stays one), not as an actor that died."""

    def __init__(self, load: Callable[[], tuple[Any, BasketData]], plan: PartPlan) -> None:
        self.plan = plan
        self.failed: Exception | None = None
        try:
            self.model, self.data = load()
            plan.check_data(self.data)
        except Exception as e:
            self.failed = e

    def write(self, p: int) -> PartInfo:
        if self.failed is not None:
            raise self.failed
        return write_part(self.model, self.data, self.plan, p)


def cluster_cpus(ray: Any) -> tuple[int, int]:
    """(CPUs of the whole cluster, CPUs of its largest node)."""
    nodes = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    return int(sum(nodes)), int(max(nodes, default=0))


def write_recommendation_parts_on_ray(
    load: Callable[[], tuple[Any, BasketData]],
    plan: PartPlan,
    *,
    actors: int | None = None,
    cpus_per_actor: int = 1,
    on_start: Callable[[int, int], None] | None = None,
) -> PartsWritten:
    """Write the whole partitioned dataset ``plan``
    (:func:`~basketgnn.workflow.recommendations.plan_parts`) on the Ray cluster this process is
    connected to (:func:`ray_cluster`): the files ``write_recommendation_parts`` writes with the
    same arguments.

    ``load`` (picklable, e.g. a :class:`CheckpointLoader`) gives each actor its recommender and
    the data ``plan`` was made from. ``actors`` (default: the cluster's CPUs //
    ``cpus_per_actor``, at most one per part to write) each reserve ``cpus_per_actor`` CPUs.
    ``on_start(parts to write, actors)`` is called before the actors start.
    """
    ray = require_ray()
    if not ray.is_initialized():
        raise RuntimeError("connect to Ray first (ray_cluster() or ray.init())")
    infos = start_parts(plan)
    todo = [p for p, info in enumerate(infos) if info is None]
    total, largest = cluster_cpus(ray)
    if cpus_per_actor > largest:
        raise UserError(
            f"--threads {cpus_per_actor}: each actor reserves that many CPUs, but the largest node "
            f"of the Ray cluster has {largest}."
        )
    n_actors = min(actors or max(total // cpus_per_actor, 1), len(todo))
    if on_start is not None:
        on_start(len(todo), n_actors)
    if todo:
        for p, info in _write_on_actors(ray, load, plan, todo, n_actors, cpus_per_actor):
            infos[p] = info
        remove_temporaries(plan, todo)  # left by actors that died mid-part
    done = [info for info in infos if info is not None]
    manifest = finish_parts(plan, Shard(), done)
    return PartsWritten(plan.folder, Shard(), done, len(todo), len(done) - len(todo), manifest)


def _write_on_actors(
    ray: Any, load: Callable[[], Any], plan: PartPlan, todo: list[int], n_actors: int, cpus: int
) -> Iterator[tuple[int, PartInfo]]:
    """(part, its info) as each of ``todo`` is written: a part is handed to the next idle actor;
    an actor that dies is restarted and its part retried; any other failure stops the run."""
    from ray.exceptions import RayActorError, RayTaskError

    writer = ray.remote(PartWriter).options(
        num_cpus=cpus, max_restarts=RETRIES, max_task_retries=RETRIES
    )
    pool = [writer.remote(load, plan) for _ in range(n_actors)]
    running: dict[Any, tuple[int, Any]] = {}
    waiting = list(reversed(todo))
    try:
        for actor in pool:
            if waiting:
                p = waiting.pop()
                running[actor.write.remote(p)] = (p, actor)
        while running:
            ready, _ = ray.wait(list(running), num_returns=1)
            p, actor = running.pop(ready[0])
            try:
                info = ray.get(ready[0])
            except RayTaskError as e:
                if isinstance(e.cause, UserError):
                    raise UserError(str(e.cause)) from None
                raise
            except RayActorError as e:
                raise UserError(
                    f"part {p} of {plan.folder} failed: its Ray actor died, and again after each of "
                    f"{RETRIES} restarts ({e}). The complete parts are kept: the same command "
                    "again writes the rest."
                ) from None
            yield p, info
            if waiting:
                q = waiting.pop()
                running[actor.write.remote(q)] = (q, actor)
    finally:
        for actor in pool:
            ray.kill(actor)
