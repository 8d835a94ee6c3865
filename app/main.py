"""The ASGI app (`app.main:app`): routers, error handling, and the lifespan that opens
every client once (and, embedded, runs the promotion worker in-process)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from app.api import context, health, ingest, jobs, memories, recall
from app.api import errors as api_errors
from app.api.deps import Services
from app.resources import open_resources
from app.services.context import ContextService
from app.services.health import HealthService
from app.services.ingest import IngestService
from app.services.jobs import JobService
from app.services.memories import MemoryService
from app.services.recall import RecallService
from app.settings import Settings
from app.worker import run_worker

DESCRIPTION = """Long-term memory for AI agents. Strata keeps an agent's history in three
layers (in-context, a Redis session buffer, long-term Qdrant + SQL) and hands back, in one
call, the context that fits the model's token budget. Errors are RFC 9457 problem+json with
a stable `code` and the `request_id`."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        async with open_resources(settings) as resources:
            ingest_service = IngestService(resources)
            recall_service = RecallService(resources)
            services = Services(
                ingest=ingest_service,
                memories=MemoryService(resources),
                recall=recall_service,
                context=ContextService(resources, ingest_service, recall_service),
                health=HealthService(resources),
                jobs=JobService(resources.db, max_attempts=settings.job_max_attempts),
            )
            stop = asyncio.Event()
            worker = (
                asyncio.create_task(run_worker(resources, stop), name="strata-worker")
                if settings.run_worker_in_process
                else None
            )
            try:
                yield {"settings": settings, "services": services, "resources": resources}
            finally:
                stop.set()
                if worker is not None:
                    try:
                        await worker
                    except Exception:  # logged; shutdown goes on to flush what it can
                        logging.getLogger("strata").exception("worker ended with an error")
                await recall_service.drain()

    app = FastAPI(
        title="Strata",
        version="0.1.0",
        summary="Long-term memory for AI agents",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    api_errors.install(app)
    for module in (health, ingest, memories, recall, context, jobs):
        app.include_router(module.router)
    return app


app = create_app()
