"""The model being served, its swap, and the one thread that scores.

:class:`ModelSlot` holds the :class:`~basketgnn.workflow.serving.NextBaskets` in service.
``reload`` loads a new one on a helper thread while the old one keeps answering, then swaps
the reference in one assignment: a batch already being scored finishes on the model it
started with, the next batch takes the new one, and every answer names the model (and
checkpoint hash) that produced it. A checkpoint that fails to load changes nothing.

:class:`Scorer` queues requests and scores them on one worker thread, all requests waiting
together in one ``NextBaskets.answer`` call (up to ``max_batch`` customers): while a batch is
being scored the next requests gather, so the per-call cost is shared under load and a lone
request is scored at once. The answer is rendered to JSON bytes on the worker thread too, so
the event loop only moves bytes. More than ``max_pending`` customers waiting is an overload
(:class:`Overloaded`, a 503), never an unbounded queue.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from basketgnn.errors import UserError
from basketgnn.workflow.serving import Answer, NextBaskets, Query

Render = Callable[[NextBaskets, list[Answer]], bytes]
#: Turns of the event loop between the first waiting request and the batch: requests already
#: received join it. A call's fixed cost (~2 ms for one customer) is then shared by more
#: customers; at 8 clients this served a quarter to a third more requests a second.
GATHER_YIELDS = 3


class Overloaded(Exception):
    """More customers are waiting than the server takes (``max_pending``)."""


class NotReady(Exception):
    """No model is loaded yet (or the first load failed: ``ModelSlot.error``)."""


class ModelSlot:
    """The model in service and its atomic swap (module docstring).

    Args:
        load: (checkpoint or None, data or None) -> a new NextBaskets; None means "as served".
    """

    def __init__(self, load: Callable[[str | None, str | None], NextBaskets]) -> None:
        self._load = load
        self.current: NextBaskets | None = None
        self.error: str | None = None
        self._lock = asyncio.Lock()

    def require(self) -> NextBaskets:
        service = self.current
        if service is None:
            raise NotReady(self.error or "the model is still loading")
        return service

    async def reload(self, checkpoint: str | None = None, data: str | None = None) -> tuple[NextBaskets, NextBaskets | None]:
        """Load beside the current model and swap; returns (new, old). Raises what the load
        raised (the current model stays)."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            try:
                new = await loop.run_in_executor(None, self._load, checkpoint, data)
            except Exception as e:
                if self.current is None:
                    self.error = reason(e)
                raise
            old, self.current, self.error = self.current, new, None
            return new, old


@dataclass
class _Job:
    queries: list[Query]
    reasons: bool
    render: Render
    future: asyncio.Future[bytes]


class Scorer:
    """Requests in, JSON bytes out, scored in batches on one thread (module docstring)."""

    def __init__(self, slot: ModelSlot, max_batch: int = 2048, max_pending: int = 20_000) -> None:
        self.slot = slot
        self.max_batch = max_batch
        self.max_pending = max_pending
        self.pending = 0
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="basketgnn-scorer")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def submit(self, queries: Sequence[Query], reasons: bool, render: Render) -> bytes:
        """The rendered answer of ``queries``; :class:`Overloaded` when too many wait, a
        :class:`UserError` of the queries, or :class:`NotReady`."""
        self.slot.require()
        if self.pending + len(queries) > self.max_pending:
            raise Overloaded(f"{self.pending} customers are waiting (at most {self.max_pending})")
        self.pending += len(queries)
        job = _Job(list(queries), reasons, render, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future  # cancelled with its request: the worker skips it

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self._queue.get()]
            for _ in range(GATHER_YIELDS):  # the loop reads requests already on the sockets
                await asyncio.sleep(0)
            size = len(jobs[0].queries)
            while not self._queue.empty() and size < self.max_batch:
                jobs.append(self._queue.get_nowait())
                size += len(jobs[-1].queries)
            service = self.slot.current  # the whole batch is answered by this model
            try:
                results = await loop.run_in_executor(self._executor, _answer_jobs, service, jobs)
            except BaseException as e:  # the executor is shutting down
                results = [e] * len(jobs)
            self.pending -= size
            for job, result in zip(jobs, results):
                if job.future.done():
                    continue
                if isinstance(result, BaseException):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)


def _answer_jobs(service: NextBaskets | None, jobs: list[_Job]) -> list[bytes | BaseException]:
    """Each job's rendered answer or its error: all jobs asking for reasons (and all not) in
    one call; a batch with an error is answered job by job, so the error reaches its job only."""
    if service is None:
        return [NotReady("the model is still loading")] * len(jobs)
    out: list[bytes | BaseException] = [b""] * len(jobs)
    for reasons in (False, True):
        group = [n for n, j in enumerate(jobs) if j.reasons == reasons]
        if not group:
            continue
        try:
            answers = service.answer([q for n in group for q in jobs[n].queries], reasons)
        except Exception:
            for n in group:
                out[n] = _one(service, jobs[n])
            continue
        start = 0
        for n in group:
            stop = start + len(jobs[n].queries)
            out[n] = _render(service, jobs[n], answers[start:stop])
            start = stop
    return out


def _one(service: NextBaskets, job: _Job) -> bytes | BaseException:
    try:
        return _render(service, job, service.answer(job.queries, job.reasons))
    except Exception as e:
        return e


def _render(service: NextBaskets, job: _Job, answers: list[Answer]) -> bytes | BaseException:
    try:
        return job.render(service, answers)
    except Exception as e:
        return e


def answer_json(service: NextBaskets, answer: Answer) -> dict[str, Any]:
    """One answer as the API returns it."""
    return {
        "customer_id": answer.customer_id, "items": answer.items, "model": service.model,
        "checkpoint_sha256": service.checkpoint_sha256, "warnings": answer.warnings,
    }  # fmt: skip


def render_one(service: NextBaskets, answers: list[Answer]) -> bytes:
    return json.dumps(answer_json(service, answers[0])).encode()


def render_many(service: NextBaskets, answers: list[Answer]) -> bytes:
    return json.dumps(
        {"answers": [answer_json(service, a) for a in answers], "model": service.model,
         "checkpoint_sha256": service.checkpoint_sha256}  # fmt: skip
    ).encode()


def reason(e: BaseException) -> str:
    """An error as one line for the client: a user error's message, else its type and text."""
    return str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
