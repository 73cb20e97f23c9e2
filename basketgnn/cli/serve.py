"""``basketgnn serve``: next baskets over HTTP (:mod:`basketgnn.serve`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from basketgnn.cli.common import CheckpointOpt, DeviceOpt, console
from basketgnn.errors import UserError

#: Seconds a new worker may take to load its model before a SIGHUP restart gives up on it.
READY_TIMEOUT_S = 300


def serve(
    checkpoint: CheckpointOpt,
    data: Annotated[
        Path | None, typer.Option(help="The customers to look up (default: the checkpoint's data).")
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; 127.0.0.1 answers this machine only (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8000,
    blocked: Annotated[
        Path | None,
        typer.Option(help="Items never recommended: a text file, one item id per line, read again when it changes."),
    ] = None,
    device: DeviceOpt = None,
    threads: Annotated[
        int,
        typer.Option(
            min=1,
            help="CPU threads for scoring. 1: the other cores serve HTTP beside it, and one "
            "customer at a time is fastest on one thread.",
        ),
    ] = 1,
    max_pending: Annotated[
        int, typer.Option(min=1, help="Customers waiting to be scored beyond which requests get 503.")
    ] = 20_000,
    access_log: Annotated[bool, typer.Option(help="Log every request (errors are always logged).")] = False,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes, each with its own copy of the model, sharing the port. With "
            "more than 1, SIGHUP to this process replaces them one by one (a new model without "
            "downtime; a checkpoint that does not load keeps the old workers).",
        ),
    ] = 1,
) -> None:
    """Serve next baskets over HTTP, with the reasons for each item, and a page at /.

    Endpoints: GET /health, GET /ready, GET /v1/customers/{id}/next-basket?k=10, POST
    /v1/customers/{id}/next-basket {"recent": [["milk"]]}, POST /v1/next-basket {"history":
    [["milk","bread"],["milk"]], "k": 10, "exclude": ["bread"]}, POST /v1/next-baskets
    {"customers": [...]}, POST /admin/reload (X-API-Key: $BASKETGNN_ADMIN_KEY) or SIGHUP for a
    new model without downtime; the API is described at /docs.

    Example: `basketgnn serve --checkpoint runs/demo/dnntsp/best.pt` then open
    http://127.0.0.1:8000/.
    """
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"basketgnn serve needs the serve extra ({', '.join(missing)} missing): pip install 'basketgnn[serve]'")
    import uvicorn

    from basketgnn.serve.settings import WORKERS_ENV, ServeSettings

    settings = ServeSettings(
        str(checkpoint), None if data is None else str(data), None if blocked is None else str(blocked),
        device, threads, max_pending=max_pending,
    )  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    if workers == 1:
        from basketgnn.serve.app import create_app

        app = create_app(settings, load_now=True)  # a checkpoint that does not load stops here
        service = app.state.slot.current
        customers = 0 if service.data is None else service.data.n_users
        console.print(
            f"serving {checkpoint} ({service.model}, {service.n_items:,} items, {customers:,} customers) "
            f"on http://{host}:{port}/",
            highlight=False,
        )
        uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info")
        return
    # This process only supervises: the settings are checked in a short-lived process, and each
    # worker loads its own copy (basketgnn.serve.asgi, from the environment).
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        problem = pool.apply(_check, (settings,))
    if problem is not None:
        raise UserError(problem)
    console.print(f"serving {checkpoint} on http://{host}:{port}/ with {workers} worker processes", highlight=False)
    os.environ.update({**settings.to_env(), WORKERS_ENV: str(workers)})
    uvicorn.run(
        "basketgnn.serve.asgi:app", host=host, port=port, workers=workers, access_log=access_log,
        log_level="info", timeout_worker_healthcheck=READY_TIMEOUT_S,
    )  # fmt: skip


def _check(settings: object) -> str | None:
    """In the short-lived process: why the settings cannot be served, None when they load."""
    from basketgnn.serve.app import check_settings

    return check_settings(settings)  # type: ignore[arg-type]
