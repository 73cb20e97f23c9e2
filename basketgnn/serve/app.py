"""The HTTP API and the page: an ASGI app (FastAPI) over one
:class:`~basketgnn.workflow.serving.NextBaskets`.

Endpoints:

- ``GET /health``: the process is up. ``GET /ready``: a model is loaded (503 until then).
- ``GET /v1/customers/{id}/next-basket?k=10``: a stored customer's next basket.
- ``POST /v1/customers/{id}/next-basket`` ``{"recent": [["milk"]], "k": 10}``: the stored
  history plus the baskets bought since the data was prepared.
- ``POST /v1/next-basket`` ``{"history": [["milk", "bread"], ["milk"]], "k": 10,
  "exclude": ["bread"]}``: any history in original item ids.
- ``POST /v1/next-baskets`` ``{"customers": [{"customer_id": "C1"}, {"history": [...]}]}``.
- ``GET /v1/customers/{id}/history?last=20``: a stored customer's baskets (for the page).
- ``POST /admin/reload`` (API key): a new checkpoint without downtime (``worker.ModelSlot``);
  SIGHUP reloads the checkpoint served.
- ``GET /``: the page to look up a customer or paste a history (``page.html``).

An answer is ``{"customer_id", "items": [{"item_id", "rank", "score", "reasons"}], "model",
"checkpoint_sha256", "warnings"}``; errors are JSON (``schemas``) with a request id, which
every response also carries in its ``x-request-id`` header.

``create_app(settings)`` builds an app; :mod:`basketgnn.serve.asgi` builds one from
environment variables for any ASGI server.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from importlib import resources
from typing import Any

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from basketgnn.errors import UserError
from basketgnn.serve import schemas
from basketgnn.serve.settings import ADMIN_KEY_ENV, WORKERS_ENV, ServeSettings
from basketgnn.serve.worker import (
    ModelSlot,
    NotReady,
    Overloaded,
    Scorer,
    reason,
    render_many,
    render_one,
)
from basketgnn.workflow.serving import BlockedItems, NextBaskets, UnknownCustomer
from basketgnn.workflow.serving import Query as NextQuery

log = logging.getLogger("basketgnn.serve")


def load_service(settings: ServeSettings, blocked: BlockedItems | None) -> NextBaskets:
    """The NextBaskets ``settings`` describe, scoring on its threads."""
    service = NextBaskets.load(settings.checkpoint, settings.data, settings.device, blocked=blocked)
    service.recommender.with_threads(settings.threads)
    return service


def check_settings(settings: ServeSettings) -> str | None:
    """Why ``settings`` cannot be served (a user error's message), None when they load: run in
    a short-lived process by ``serve --workers N`` before it starts the workers."""
    try:
        create_app(settings, load_now=True)
    except UserError as e:
        return str(e)
    return None


def create_app(settings: ServeSettings, load_now: bool = False) -> FastAPI:
    """The app serving ``settings``. ``load_now``: load the model here (its errors raise
    here); else it loads at startup, before the first request is accepted."""
    blocked = BlockedItems(settings.blocked) if settings.blocked else None
    state = {"settings": settings}
    service = load_service(settings, blocked) if load_now else None

    def load(checkpoint: str | None, data: str | None) -> NextBaskets:
        s = state["settings"]
        if checkpoint is not None:  # a new checkpoint reads its own data unless told otherwise
            s = replace(s, checkpoint=checkpoint, data=data if data is not None else settings.data)
        elif data is not None:
            s = replace(s, data=data)
        new = load_service(s, blocked)
        state["settings"] = s
        return new

    slot = ModelSlot(load)
    slot.current = service
    scorer = Scorer(slot, settings.max_batch, settings.max_pending)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if slot.current is None:
            # Before the first request is accepted: a server started by a process manager
            # (e.g. gunicorn's new workers after SIGHUP) holds connections until the model is
            # in, instead of answering 503. A checkpoint that does not load stops the startup.
            await slot.reload()
        scorer.start()
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(_reload_logged(slot)))
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / no SIGHUP
            pass
        yield
        await scorer.stop()

    app = FastAPI(
        title="basketgnn", summary="Next baskets with their reasons.", lifespan=lifespan,
        docs_url="/docs", redoc_url=None,
    )  # fmt: skip
    app.state.slot, app.state.scorer, app.state.blocked = slot, scorer, blocked
    _add_errors(app)
    app.add_middleware(_RequestId)

    _add_status_routes(app, slot, blocked)
    _add_next_basket_routes(app, slot, scorer)
    _add_admin_routes(app, slot)
    return app


def _add_status_routes(app: FastAPI, slot: ModelSlot, blocked: BlockedItems | None) -> None:
    """The page, /health and /ready."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(resources.files("basketgnn.serve").joinpath("page.html").read_text())

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    def ready() -> Response:
        service = slot.current
        if service is None:
            body = {"ready": False, "reason": slot.error or "the model is still loading"}
            return JSONResponse(body, status_code=503, headers={"retry-after": "1"})
        return JSONResponse({
            "ready": True, "model": service.model, "checkpoint": str(service.checkpoint),
            "checkpoint_sha256": service.checkpoint_sha256, "items": service.n_items,
            "customers": 0 if service.data is None else service.data.n_users,
            "blocked_items": len(blocked.current()) if blocked else 0,
            "blocked_items_error": blocked.error if blocked else None,
        })  # fmt: skip


def _add_next_basket_routes(app: FastAPI, slot: ModelSlot, scorer: Scorer) -> None:
    """The next-basket endpoints and a stored customer's history."""

    @app.get("/v1/customers/{customer_id}/next-basket")
    async def customer_next_basket(
        customer_id: str,
        k: int = Query(10, ge=1, le=schemas.MAX_K),
        reasons: bool = True,
        exclude: list[str] = Query([]),
    ) -> Response:
        query = NextQuery(customer_id, None, k, tuple(exclude))
        return _json(await scorer.submit([query], reasons, render_one))

    @app.post("/v1/customers/{customer_id}/next-basket")
    async def customer_next_basket_recent(customer_id: str, body: schemas.RecentRequest) -> Response:
        query = NextQuery(customer_id, _baskets(body.recent), body.k, _ids(body.exclude))
        return _json(await scorer.submit([query], body.reasons, render_one))

    @app.post("/v1/next-basket")
    async def next_basket(body: schemas.HistoryRequest) -> Response:
        query = NextQuery(None, _baskets(body.history), body.k, _ids(body.exclude), label=body.customer_id)
        return _json(await scorer.submit([query], body.reasons, render_one))

    @app.post("/v1/next-baskets")
    async def next_baskets(body: schemas.BatchRequest) -> Response:
        queries = []
        for n, c in enumerate(body.customers):
            exclude = _ids([*body.exclude, *c.exclude])
            if c.customer_id is not None and c.history is None:
                baskets = None if c.recent is None else _baskets(c.recent)
                queries.append(NextQuery(c.customer_id, baskets, body.k, exclude))
            elif c.customer_id is None and c.history is not None and c.recent is None:
                queries.append(NextQuery(None, _baskets(c.history), body.k, exclude))
            else:
                raise _BadEntry(n)
        return _json(await scorer.submit(queries, body.reasons, render_many))

    @app.get("/v1/customers/{customer_id}/history")
    def history(customer_id: str, last: int = Query(20, ge=1, le=schemas.MAX_BASKETS)) -> dict[str, Any]:
        service = slot.require()
        baskets = service.stored_history(customer_id)
        return {"customer_id": customer_id, "n_baskets": len(baskets), "baskets": baskets[-last:]}


def _add_admin_routes(app: FastAPI, slot: ModelSlot) -> None:
    """/admin/reload: a new model without downtime (an API key from the environment)."""

    @app.post("/admin/reload")
    async def admin_reload(request: Request, body: schemas.ReloadRequest | None = Body(None)) -> Response:
        _check_admin(request)
        workers = int(os.environ.get(WORKERS_ENV, "1"))
        if workers > 1:
            return _error(request, 409, "several_workers",
                          f"this server runs {workers} worker processes and a request reaches one of them",
                          None, f"write the new checkpoint to the served path, then send SIGHUP to the parent "
                          f"process (kill -HUP {os.getppid()}): it replaces the workers one by one")  # fmt: skip
        body = body or schemas.ReloadRequest()
        t0 = time.perf_counter()
        try:
            new, old = await slot.reload(body.checkpoint, body.data)
        except Exception as e:
            serving = slot.current
            still = f"still serving {serving.checkpoint} ({serving.checkpoint_sha256[:12]})" if serving else "no model is served"
            log.warning("reload failed: %s; %s", reason(e), still)
            return _error(request, 422, "reload_failed", f"the new model did not load: {reason(e)}; {still}", "checkpoint",
                          "check the path and that the file is a basketgnn checkpoint (best.pt)")  # fmt: skip
        log.info("reloaded %s (%s) in %.1fs", new.checkpoint, new.checkpoint_sha256[:12], time.perf_counter() - t0)
        return JSONResponse({
            "model": new.model, "checkpoint": str(new.checkpoint), "checkpoint_sha256": new.checkpoint_sha256,
            "previous_sha256": None if old is None else old.checkpoint_sha256,
            "seconds": round(time.perf_counter() - t0, 3),
        })  # fmt: skip


async def _reload_logged(slot: ModelSlot) -> None:
    try:
        new, _ = await slot.reload()
        log.info("SIGHUP: reloaded %s (%s)", new.checkpoint, new.checkpoint_sha256[:12])
    except Exception as e:
        log.warning("SIGHUP: reload failed, the old model keeps serving: %s", reason(e))


def _baskets(baskets: list[list[Any]]) -> list[list[str]]:
    return [[str(i) for i in b] for b in baskets]


def _ids(ids: list[Any]) -> tuple[str, ...]:
    return tuple(str(i) for i in ids)


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json")


class _BadEntry(Exception):
    def __init__(self, n: int) -> None:
        self.n = n


def _check_admin(request: Request) -> None:
    key = os.environ.get(ADMIN_KEY_ENV)
    if not key:
        raise _Denied(403, f"admin endpoints are off: start the server with {ADMIN_KEY_ENV} set to a secret key")
    given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not given or not hmac.compare_digest(given.encode(), key.encode()):
        raise _Denied(401, f"a wrong or missing API key: send the key of {ADMIN_KEY_ENV} in the X-API-Key header")


class _Denied(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


def _request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id") or uuid.uuid4().hex[:16])


def _error(request: Request, status: int, code: str, message: str, field: str | None = None,
           fix: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:  # fmt: skip
    return JSONResponse(schemas.error_body(code, message, _request_id(request), field, fix), status, headers=headers)


def _add_errors(app: FastAPI) -> None:
    """Every error as JSON naming the field and the fix (``schemas``)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        code, message, field, fix = schemas.describe_validation(list(e.errors()))
        return _error(request, 400 if code == "bad_json" else 422, code, message, field, fix)

    @app.exception_handler(UnknownCustomer)
    async def unknown(request: Request, e: UnknownCustomer) -> JSONResponse:
        return _error(request, 404, "unknown_customer", str(e), "customer_id",
                      'POST their baskets to /v1/next-basket: {"history": [["milk", "bread"], ["milk"]]}')  # fmt: skip

    @app.exception_handler(UserError)
    async def user_error(request: Request, e: UserError) -> JSONResponse:
        return _error(request, 422, "invalid_request", str(e))

    @app.exception_handler(_BadEntry)
    async def bad_entry(request: Request, e: _BadEntry) -> JSONResponse:
        return _error(request, 422, "invalid_request",
                      f"customers[{e.n}] needs a customer_id (with or without recent baskets) or a history, not both",
                      f"customers[{e.n}]", schemas.FIXES["customers"])  # fmt: skip

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, e: Overloaded) -> JSONResponse:
        return _error(request, 503, "overloaded", f"the server is busy: {e}", None,
                      "retry after a second, or send fewer customers per call", {"retry-after": "1"})  # fmt: skip

    @app.exception_handler(NotReady)
    async def not_ready(request: Request, e: NotReady) -> JSONResponse:
        return _error(request, 503, "not_ready", f"no model is loaded: {e}", None, "wait until /ready answers 200",
                      {"retry-after": "1"})  # fmt: skip

    @app.exception_handler(_Denied)
    async def denied(request: Request, e: _Denied) -> JSONResponse:
        return _error(request, e.status, "forbidden" if e.status == 403 else "unauthorized", e.message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        fix = "the endpoints are listed at /docs" if e.status_code in (404, 405) else None
        return _error(request, e.status_code, "http_error", f"{request.method} {request.url.path}: {e.detail}", None, fix)

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception) -> JSONResponse:
        rid = _request_id(request)
        log.error("request %s (%s %s) failed", rid, request.method, request.url.path, exc_info=e)
        return _error(request, 500, "internal", f"an internal error; the server log has request id {rid}")


#: Request ids: a random prefix per process and a counter (unique in the logs of every worker;
#: cheaper than a uuid4 per request).
_ID_PREFIX = uuid.uuid4().hex[:8]
_ids_made = itertools.count()


class _RequestId:
    """An id for every request (scope state ``request_id``), returned as ``x-request-id``; and
    every POST body read as JSON, whatever its content type (``curl -d`` sends a form type)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = f"{_ID_PREFIX}{next(_ids_made):08x}"
        scope.setdefault("state", {})["request_id"] = rid
        if scope["method"] == "POST":
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope["headers"] = [*headers, (b"content-type", b"application/json")]

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", []).append((b"x-request-id", rid.encode()))
            await send(message)

        await self.app(scope, receive, send_with_id)
