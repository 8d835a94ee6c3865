"""The ASGI app, built by a factory (`uvicorn --factory app.main:create_app`): routers,
error handling, and the lifespan that opens every client once and builds the services
(and, embedded, runs the worker in-process). Nothing here reads the environment at import.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypedDict

from fastapi import FastAPI

from app import logs
from app.api import (
    context,
    graph,
    health,
    ingest,
    jobs,
    memories,
    profile,
    recall,
    rewrite,
    scratchpad,
    summaries,
)
from app.api import errors as api_errors
from app.resources import Resources, open_resources
from app.settings import Settings
from app.wiring import Services, build_services
from app.worker import run_worker

DESCRIPTION = """Long-term memory for AI agents. Strata keeps an agent's history in three
layers (in-context, a Redis session buffer, long-term Qdrant + SQL) and hands back, in one
call, the context that fits the model's token budget. Errors are RFC 9457 problem+json with
a stable `code` and the `request_id`."""

log = logging.getLogger("strata")


class State(TypedDict):
    """What the lifespan hands to every request (`request.state.<key>`)."""

    settings: Settings
    resources: Resources
    services: Services


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app on `settings` (default: read from the environment, now, not at import)."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[State]:
        logs.configure(settings.log_level, settings.log_format)
        async with open_resources(settings) as resources:
            services = build_services(resources)
            stop = asyncio.Event()
            worker = (
                asyncio.create_task(run_worker(resources, stop), name="strata-worker")
                if settings.run_worker_in_process
                else None
            )
            try:
                yield State(settings=settings, resources=resources, services=services)
            finally:
                stop.set()
                if worker is not None:
                    try:
                        await worker
                    except Exception:  # logged; shutdown goes on to flush what it can
                        log.exception("worker ended with an error")
                await services.recall.drain()

    app = FastAPI(
        title="Strata",
        version="0.1.0",
        summary="Long-term memory for AI agents",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    api_errors.install(app)
    for module in (
        health,
        ingest,
        scratchpad,
        memories,
        recall,
        rewrite,
        context,
        summaries,
        jobs,
        profile,
        graph,
    ):
        app.include_router(module.router)
    return app
