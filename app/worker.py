"""The worker: `python -m app.worker` (full stack), or a task inside the api (embedded).
Both run `run_worker` on resources from the same factory, with services from the same
wiring (`app.wiring`): promotion, and beside it the job runner and the periodic scheduler
(docs/architecture.md, "Background work")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid

from app import logs
from app.jobs import reindex
from app.jobs import tasks as job_tasks
from app.jobs.catalog import build_registry
from app.jobs.registry import Registry
from app.jobs.reindex import REINDEX
from app.resources import Resources, open_resources
from app.settings import Settings
from app.stores.buffer import WakeListener
from app.wiring import (
    build_fact_extractor,
    build_promoter,
    build_reindexer,
    build_summaries,
)

log = logging.getLogger("strata.worker")


async def run_worker(
    resources: Resources, stop: asyncio.Event, registry: Registry | None = None
) -> None:
    """Promote until `stop` is set: a pass after every wake-up, and one per poll interval
    (a missed wake-up only delays work). Errors are logged and retried, never fatal.
    Jobs of `registry` (default: every kind the service has) run alongside."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    promoter = build_promoter(resources, owner, stop)
    listener = resources.buffer.wake_listener()
    poll = resources.settings.worker_poll_seconds
    if registry is None:
        registry = build_registry(
            resources.db,
            resources.settings,
            summary_service=build_summaries(resources),
            reindexer=build_reindexer(resources),
            fact_extractor=build_fact_extractor(resources),
        )
    if REINDEX in registry.kinds:
        await _reindex_if_empty(resources)
    jobs = job_tasks.start(resources.db, resources.settings, owner, stop, registry)
    log.info("worker %s started", owner)
    try:
        while not stop.is_set():
            try:
                done = await promoter.run_once()
                if resources.settings.worker_heartbeat_file is not None:
                    resources.settings.worker_heartbeat_file.touch()
            except Exception:
                log.exception("promotion pass failed; retrying")
                done = 0
                await _sleep_or_stop(stop, poll)
            if done == 0 and not stop.is_set():
                await _wait_for_work(listener, stop, poll)
            if done < resources.settings.worker_batch_messages:
                # Not saturated: let a trickle of single messages gather into one pass.
                await _sleep_or_stop(stop, resources.settings.worker_debounce_seconds)
    finally:
        if not stop.is_set():  # cancelled: the job tasks will not see `stop`
            for task in jobs:
                task.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        with contextlib.suppress(Exception):
            await listener.close()
        log.info("worker %s stopped", owner)


async def _reindex_if_empty(resources: Resources) -> None:
    """An empty index beside live memories in SQL (a new index schema or model, a lost
    volume): enqueue its rebuild. Never fatal: promotion and the jobs go on regardless."""
    try:
        await reindex.enqueue_if_empty(
            resources.db, resources.vectors, max_attempts=resources.settings.job_max_attempts
        )
    except Exception:
        log.exception("could not check whether the index needs a rebuild")


async def _wait_for_work(listener: WakeListener, stop: asyncio.Event, poll: float) -> None:
    """Until a wake-up, `stop`, or the poll interval. If the buffer is down the wake-ups
    are lost, not the work: wait out the interval instead of spinning."""
    waiter = asyncio.ensure_future(listener.wait(poll))
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for task in (waiter, stopper):
        task.cancel()
    await asyncio.gather(waiter, stopper, return_exceptions=True)
    if waiter.done() and not waiter.cancelled() and waiter.exception() is not None:
        log.warning("wake-up channel unavailable: %s", waiter.exception())
        await _sleep_or_stop(stop, poll)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def main() -> None:
    settings = Settings()
    logs.configure(settings.log_level, settings.log_format)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with open_resources(settings) as resources:
        await run_worker(resources, stop)


if __name__ == "__main__":
    asyncio.run(main())
