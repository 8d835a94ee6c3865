"""The ASGI app, built by a factory (`uvicorn --factory app.main:create_app`): routers,
error handling, and the lifespan that opens the one container of services (app/wiring.py)
and, embedded, runs the worker in-process on that same container. Nothing here reads the
environment at import.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from typing import TypedDict

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Route

from app import console, logs, malloc
from app import mcp as strata_mcp
from app.api import (
    admin,
    context,
    graph,
    health,
    ingest,
    jobs,
    keys,
    memories,
    metrics,
    profile,
    recall,
    rewrite,
    scratchpad,
    summaries,
    users,
)
from app.api import docs as api_docs
from app.api import errors as api_errors
from app.api.limits import BodyLimitMiddleware
from app.core.clock import Clock
from app.datalock import DataDirLock
from app.metrics import Metrics, RequestMetrics
from app.resources import Resources
from app.settings import Settings, refuse_unworkable
from app.wiring import Container, Services, open_container
from app.worker import start_in_process

DESCRIPTION = """Long-term memory for AI agents. Strata keeps an agent's history in three
layers (in-context, a Redis session buffer, long-term Qdrant + SQL) and hands back, in one
call, the context that fits the model's token budget. Errors are RFC 9457 problem+json with
a stable `code` and the `request_id`.

Limits (defaults): a request body over 2 MiB (`STRATA_MAX_BODY_BYTES`) is a 413
`request_too_large`; an ingest request over 200,000 characters of content
(`STRATA_INGEST_MAX_CHARS`) is a 413 `too_many_characters`; JSON types are strict (no
`"10"` for an integer, no `0` for a boolean, times only as ISO-8601 strings with an
offset)."""

log = logging.getLogger("strata")


def _operation_id(route: APIRoute) -> str:
    """The route function's own name (`recall`, `add_messages`, `get_context`): what a
    generated client exposes, so it is a short verb, never the path spelled out."""
    return route.name


class State(TypedDict):
    """What the lifespan hands to every request (`request.state.<key>`)."""

    settings: Settings
    resources: Resources
    container: Container
    services: Services
    metrics: Metrics  # read by the RequestMetrics middleware


@contextlib.asynccontextmanager
async def _switch_interval(seconds: float) -> AsyncIterator[None]:
    """The GIL's switch interval for the api's life (process-wide: `sys.setswitchinterval`),
    the one before given back after (tests start many apps in one process)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _lifespan(
    settings: Settings, clock: Clock | None, mcp_endpoint: strata_mcp.HttpEndpoint
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[State]]:
    """The api's life: the container open, the MCP sessions and the in-process worker (when
    set) running, and on the way out the worker finished and reinforcements flushed."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[State]:
        logs.configure(settings.log_level, settings.log_format)
        async with (
            _switch_interval(settings.gil_switch_interval_ms / 1000),
            DataDirLock(settings, "the api"),  # no `strata import` beside it (app/datalock.py)
            open_container(settings, clock=clock) as container,
            contextlib.AsyncExitStack() as stack,
        ):
            resources, services = container.resources, container.services
            await services.keys.resolve_mode()  # refuses to serve without keys by accident
            # After the checks: its task group would wrap their refusal in an ExceptionGroup.
            await stack.enter_async_context(mcp_endpoint.server.session_manager.run())
            if settings.gc_freeze:
                malloc.freeze_long_lived()
            worker = start_in_process(container) if settings.run_worker_in_process else None
            try:
                yield State(
                    settings=settings,
                    resources=resources,
                    container=container,
                    services=services,
                    metrics=resources.metrics,
                )
            finally:
                if worker is not None:
                    try:
                        await worker.stop()
                    except Exception:  # logged; shutdown goes on to flush what it can
                        log.exception("worker ended with an error")
                await services.recall.drain()

    return lifespan


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> FastAPI:
    """The app on `settings` (default: read from the environment, now, not at import).
    `clock` moves "now" for reinforcement and forgetting (simulations, bench/forgetting.py)."""
    settings = settings or Settings()
    refuse_unworkable(settings, "api")
    # Before the lifespan starts the threads that would each get an arena.
    malloc.tune_malloc(settings.malloc_arena_max, settings.malloc_mmap_threshold_bytes)

    mcp_endpoint = strata_mcp.HttpEndpoint(strata_mcp.build_server())

    app = FastAPI(
        title="Strata",
        version="0.1.0",
        summary="Long-term memory for AI agents",
        description=DESCRIPTION,
        lifespan=_lifespan(settings, clock, mcp_endpoint),
        docs_url=None,  # served from the package's own assets (app/api/docs.py)
        redoc_url=None,
        generate_unique_id_function=_operation_id,
    )
    api_docs.install(app)
    # MCP over streamable HTTP, behind the same keys (app/mcp.py); not a REST route.
    app.router.routes.append(
        Route(strata_mcp.PATH, mcp_endpoint, methods=["GET", "POST", "DELETE"])
    )
    # Added first, so it runs inside the request id middleware that `install` adds.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    api_errors.install(app)
    # Added last, so outermost: the time includes the error handlers and the request id.
    app.add_middleware(RequestMetrics)
    for module in (
        health,
        metrics,
        ingest,
        scratchpad,
        memories,
        recall,
        rewrite,
        context,
        summaries,
        users,
        jobs,
        keys,
        admin,
        profile,
        graph,
    ):
        app.include_router(module.router)
    app.include_router(console.router)  # /console: pages, not in the OpenAPI (docs/console.md)
    return app
