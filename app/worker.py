"""The worker: `python -m app.worker` (full stack), or inside the api (embedded): as a task
on the api's loop (`WorkerTask`), or with `STRATA_WORKER_THREAD=true` on a thread and event
loop of its own (`WorkerThread`). Each runs `run_worker` on a container of `app.wiring`:
promotion, and beside it the job runner and the periodic scheduler (docs/architecture.md,
"Background work"). On its thread the worker's container is built on the api's
resources, with clients of its own loop where a client belongs to one (`open_for_thread`),
so that promotion's coroutines never queue between a request's statements; measured, that
did not lower one-message ingest's p99 on two cores (docs/reliability.md, "The worker's own
thread")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

from app import logs, malloc
from app.jobs import tasks as job_tasks
from app.jobs.registry import Registry
from app.resources import Resources, open_for_thread
from app.services.reindex import REINDEX
from app.settings import Settings, refuse_unworkable
from app.stores import heartbeats
from app.stores.loops import Wakeup
from app.stores.signals import Signals
from app.wiring import Container, build_container, open_container

log = logging.getLogger("strata.worker")


async def run_worker(
    container: Container, stop: asyncio.Event, registry: Registry | None = None
) -> None:
    """Promote until `stop` is set: pass after pass while there is backlog (each takes one
    bounded slice per session, in turns), then wait for a wake-up or the poll interval (a
    missed wake-up only delays work). Errors are logged and retried, never fatal. Jobs of
    `registry` (default: every kind the service has, on the container's services) run
    alongside. The promoter is this worker's own: `owner` names its leases."""
    resources = container.resources
    settings = resources.settings
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    promoter = container.promoter(owner, stop)
    signals = resources.signals
    poll = settings.worker_poll_seconds
    trimmer = malloc.Trimmer(settings.trim_after_messages)
    if registry is None:
        registry = container.registry(promoter.run_once)
    if REINDEX in registry.kinds:
        await _reindex_if_empty(container)
    jobs = job_tasks.start(
        resources.db, resources.settings, owner, stop, registry, metrics=resources.metrics
    )
    heart = _Heart(resources, owner)
    await heart.beat()
    beating = asyncio.create_task(heart.run(stop), name="strata-heartbeat")
    log.info("worker %s started", owner)
    try:
        while not stop.is_set():
            signals.work.clear()  # what arrives from here on is seen by this pass or wakes us
            signals.urgent.clear()  # a request that waits from here on ends the next pause
            try:
                started = time.perf_counter()
                done = await promoter.run_once()
                resources.metrics.observe_promotion(time.perf_counter() - started, done)
                trimmer.promoted(done)
                if resources.settings.worker_heartbeat_file is not None:
                    resources.settings.worker_heartbeat_file.touch()
            except Exception:
                log.exception("promotion pass failed; retrying")
                resources.metrics.promotion_failures.inc()
                done = 0
                await _sleep_or_stop(stop, poll)
            if done == 0 and not stop.is_set():
                # Idle after a backlog: what its batches freed goes back to the system
                # (a C call that releases the GIL, off the event loop).
                if trimmer.due(time.monotonic()) and await asyncio.to_thread(trimmer.idle):
                    resources.metrics.heap_trims.inc()
                await _wait_for_work(signals, stop, poll)
            elif not promoter.left_backlog and settings.worker_debounce_seconds:
                # A trickle (the pass took all there was): gather what arrives next into one
                # pass, unless a request waits for the index (`Signals.hurry`) or started to
                # meanwhile. A backlog (an import) goes on at once.
                await _wait_for(signals.urgent, stop, settings.worker_debounce_seconds)
    finally:
        current = asyncio.current_task()
        if not stop.is_set() or (current is not None and current.cancelling()):
            # Cancelled (by a shutdown past its grace, say): the job tasks go too, or the
            # wait below would outlast the grace with them.
            for task in jobs:
                task.cancel()
        beating.cancel()
        await asyncio.gather(*jobs, beating, return_exceptions=True)
        await heart.stop()
        log.info("worker %s stopped", owner)


_CANCEL_WAIT_SECONDS = 2.0  # after the grace: what a cancelled pass gets to give its leases back


async def finish(task: asyncio.Task[None], grace: float) -> None:
    """Let a worker whose `stop` is set end its pass, for at most `grace` seconds, then
    cancel it: a shutdown must not wait on a slow model call or a frozen connection. What
    a cancelled pass had not committed is promoted again after the restart (the log keeps
    the messages; its leases are given back, or expire). Re-raises what the worker raised;
    a cancellation of the caller still cancels the wait."""
    done, _ = await asyncio.wait({task}, timeout=grace)
    if not done:
        log.warning("the worker did not stop within %.1f s; cancelling its pass", grace)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=min(grace, _CANCEL_WAIT_SECONDS))
        if not done:
            log.error("the worker ignored its cancellation; leaving it")
            return
    if not task.cancelled() and (exc := task.exception()) is not None:
        raise exc


class _Heart:
    """Writes the worker's heartbeat row (read by `/readyz`) every
    `worker_heartbeat_seconds`, from a task of its own: a long pass is not a dead worker,
    but a process that died or an event loop that froze stops beating. Never fatal."""

    def __init__(self, resources: Resources, owner: str) -> None:
        self.db = resources.db
        self.every = resources.settings.worker_heartbeat_seconds
        self.owner = owner
        self.started_at = datetime.now(UTC)
        self._last = 0.0

    async def beat(self) -> None:
        try:
            now = datetime.now(UTC)
            async with self.db.transaction() as tx:
                if not self._last:  # at start: forget the workers that died a day ago
                    await heartbeats.purge_before(tx, now - timedelta(days=1))
                await heartbeats.beat(tx, self.owner, self.started_at, now)
            self._last = time.monotonic()
        except Exception:
            log.warning("could not write the worker heartbeat", exc_info=True)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_or_stop(stop, self.every)
            await self.beat()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            async with self.db.transaction() as tx:
                await heartbeats.forget(tx, self.owner)


async def _reindex_if_empty(container: Container) -> None:
    """An empty index beside live memories in SQL (a new index schema or model, a lost
    volume): enqueue its rebuild. Never fatal: promotion and the jobs go on regardless."""
    try:
        await container.reindexer.enqueue_if_empty(
            max_attempts=container.resources.settings.job_max_attempts
        )
    except Exception:
        log.exception("could not check whether the index needs a rebuild")


async def _wait_for_work(signals: Signals, stop: asyncio.Event, poll: float) -> None:
    """Until a wake-up (ingest in this process, or another's over Redis), `stop`, or the
    poll interval. If Redis is down the other processes' wake-ups are lost, not the work."""
    await _wait_for(signals.work, stop, poll)


async def _wait_for(event: Wakeup, stop: asyncio.Event, seconds: float) -> None:
    """Until `event`, `stop`, or `seconds`."""
    waiter = asyncio.ensure_future(event.wait())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, stopper}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    for task in (waiter, stopper):
        task.cancel()
    await asyncio.gather(waiter, stopper, return_exceptions=True)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class WorkerTask:
    """The in-process worker as a task on the caller's (the api's) loop."""

    def __init__(self, container: Container) -> None:
        self.grace = container.resources.settings.worker_stop_grace_seconds
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(run_worker(container, self._stop), name="strata-worker")

    async def stop(self) -> None:
        """Ends the worker (`finish`); re-raises what it raised."""
        self._stop.set()
        await finish(self._task, self.grace)


class WorkerThread:
    """The in-process worker on a thread and event loop of its own, on `container`'s
    resources: `open_for_thread` gives it clients of its loop, and the stores it shares
    with the api's loop take turns across loops (app/stores/loops.py)."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.grace = container.resources.settings.worker_stop_grace_seconds
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()  # the worker loop's (bound there at its first wait)
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._main, name="strata-worker", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            with asyncio.Runner(loop_factory=lambda: self.loop) as runner:
                runner.run(self._run())
        except BaseException as exc:  # reported to `stop`, on the api's loop
            self._ended.set_exception(exc)
        else:
            self._ended.set_result(None)

    async def _run(self) -> None:
        async with open_for_thread(self.container.resources) as resources:
            worker = asyncio.create_task(
                run_worker(build_container(resources), self._stop), name="strata-worker"
            )
            stopping = asyncio.create_task(self._stop.wait())
            try:
                await asyncio.wait({worker, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            await finish(worker, self.grace)

    async def stop(self) -> None:
        """Ends the worker (`finish`, on its loop) and its thread; re-raises what it
        raised. A thread that outlives its grace and the time to close its clients is
        left behind (a daemon), as a task that ignores its cancellation is."""
        with contextlib.suppress(RuntimeError):  # its loop is closed: it ended already
            self.loop.call_soon_threadsafe(self._stop.set)
        limit = self.grace + _CANCEL_WAIT_SECONDS + _CLOSE_SECONDS
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._ended)), limit)
        except TimeoutError:
            log.error("the worker's thread did not end within %.0f s; leaving it", limit)


_CLOSE_SECONDS = 5.0  # after the worker's pass: its thread's clients closed


def start_in_process(container: Container) -> WorkerTask | WorkerThread:
    """The api's worker (`Settings.run_worker_in_process`): on a thread of its own where the
    stores can be shared across loops (`Settings.worker_on_thread`), else a task here."""
    if container.resources.settings.worker_on_thread:
        return WorkerThread(container)
    return WorkerTask(container)


async def main() -> None:
    settings = Settings()
    refuse_unworkable(settings, "worker")
    malloc.tune_malloc(settings.malloc_arena_max, settings.malloc_mmap_threshold_bytes)
    logs.configure(settings.log_level, settings.log_format)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with open_container(settings) as container:
        resources = container.resources
        if settings.worker_metrics_port is not None:
            # prometheus_client's own HTTP server, on a daemon thread (scrape: GET /metrics).
            resources.metrics.serve(settings.worker_metrics_port)
            log.info("worker metrics on port %d", settings.worker_metrics_port)
        if settings.gc_freeze:
            malloc.freeze_long_lived()
        worker = asyncio.create_task(run_worker(container, stop), name="strata-worker")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({worker, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        await finish(worker, settings.worker_stop_grace_seconds)


if __name__ == "__main__":
    asyncio.run(main())
