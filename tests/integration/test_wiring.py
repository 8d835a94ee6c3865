"""Embedded, the in-process worker runs as a task on the api's loop, on the api's own
container: its jobs call the very services the routes use. With `STRATA_WORKER_THREAD=true`
it runs on a thread and event loop of its own, on a container built on the api's resources
(app/worker.py, `WorkerThread`): the same index, encoder, signals and metrics, a database
handle of its own loop taking turns on the one writer lock; a wake-up from the api's loop
reaches it, and its advances reach the api's waiting requests."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.services.promotion import Promoter
from app.wiring import Container
from tests.conftest import embedded_settings, post_messages, turn


def _spy(
    monkeypatch: pytest.MonkeyPatch, owner: object, method: str, label: str, calls: set[str]
) -> None:
    real: Callable[..., Awaitable[Any]] = getattr(owner, method)

    async def spy(*args: Any, **kwargs: Any) -> Any:
        calls.add(label)
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, method, spy)


async def test_the_in_process_worker_runs_on_the_apis_container(
    tmp_path: Path, start_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    workers: list[Container] = []
    promoter = Container.promoter

    def spy_promoter(self: Container, owner: str, stop: asyncio.Event | None = None) -> Promoter:
        workers.append(self)
        return promoter(self, owner, stop)

    monkeypatch.setattr(Container, "promoter", spy_promoter)
    async with start_app(embedded_settings(tmp_path, worker_thread=False)) as running:
        container: Container = running.state["container"]
        services = container.services
        assert running.state["services"] is services
        assert running.state["resources"] is container.resources
        # The worker asked the api's container for its promoter, and no other container.
        assert workers == [container]
        # One reindexer: the memories', forgetting's and the reindex jobs'.
        assert services.memories.reindexer is container.reindexer
        assert services.forgetting.reindexer is container.reindexer

        calls: set[str] = set()
        _spy(monkeypatch, container.reindexer, "rebuild", "reindex", calls)
        _spy(monkeypatch, services.forgetting, "sweep", "forget", calls)
        _spy(monkeypatch, services.summaries, "sweep", "summarize", calls)
        user = "u-wiring"
        await post_messages(running, "s-wiring", user, [turn("the one container")])
        for task, dry_run in (("reindex", True), ("forget", True), ("summarize", False)):
            resp = await running.client.post(
                "/v1/admin/maintenance", json={"task": task, "user_id": user, "dry_run": dry_run}
            )
            assert resp.status_code == 202, resp.text
            job = resp.json()
            for _ in range(1200):
                job = (await running.client.get(f"/v1/jobs/{job['id']}")).json()
                if job["state"] in ("succeeded", "failed"):
                    break
                await asyncio.sleep(0.05)
            assert job["state"] == "succeeded", job
        # Each job of the in-process worker ran on the api's own service (the schedules'
        # sweeps may have called them too).
        assert calls == {"reindex", "forget", "summarize"}


async def test_the_worker_runs_on_a_thread_of_its_own_and_hears_the_apis_wake_up(
    tmp_path: Path, start_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    workers: list[tuple[Container, threading.Thread]] = []
    passes: list[int] = []
    promoter = Container.promoter

    def spy_promoter(self: Container, owner: str, stop: asyncio.Event | None = None) -> Promoter:
        workers.append((self, threading.current_thread()))
        made = promoter(self, owner, stop)
        run_once = made.run_once

        async def counted(max_sessions: int = 8) -> int:
            done = await run_once(max_sessions)
            passes.append(done)
            return done

        made.run_once = counted  # type: ignore[method-assign]
        return made

    monkeypatch.setattr(Container, "promoter", spy_promoter)
    # Nothing but a wake-up starts a pass, and nothing but a wake-up ends a request's wait:
    # every poll and timer of both loops is an hour.
    hour = 3600.0
    settings = embedded_settings(
        tmp_path,
        worker_thread=True,
        worker_poll_seconds=hour,
        worker_heartbeat_seconds=hour,
        job_poll_seconds=hour,
        job_lease_seconds=hour,
        wait_poll_seconds=hour,
        wait_timeout_seconds=hour,
    )
    async with start_app(settings) as running:
        container: Container = running.state["container"]
        for _ in range(1200):  # the thread builds its container, then makes its first pass
            if passes:
                break
            await asyncio.sleep(0.05)
        assert passes == [0]
        await asyncio.sleep(0.5)  # and settles into its wait for work (an hour)
        [(theirs, thread)] = workers
        assert thread is not threading.current_thread()
        assert thread.name == "strata-worker"
        assert theirs is not container
        mine, shared = container.resources, theirs.resources
        assert shared.vectors is mine.vectors
        assert shared.embedder is mine.embedder
        assert shared.signals is mine.signals
        assert shared.metrics is mine.metrics
        assert shared.db is not mine.db
        assert shared.db._writer is mine.db._writer  # one SQLite writer at a time
        # Its first pass found nothing; now it waits an hour, unless this wakes it. The
        # request waits for the index: answered once the worker, woken from this loop,
        # indexed the turn and woke the request back. Two minutes are the test's failure,
        # not its measure: a wake-up lost either way would leave it waiting the hour.
        async with asyncio.timeout(120):
            body = await post_messages(running, "s-thread", "u-thread", [turn("across loops")])
        assert body["indexed_seq"] == body["last_seq"]
        recalled = await running.client.post(
            "/v1/recall", json={"user_id": "u-thread", "query": "across loops"}
        )
        assert recalled.status_code == 200, recalled.text
        assert recalled.json()["results"]
    assert not thread.is_alive()  # stopped with the app


async def test_the_api_sets_the_gils_switch_interval_for_its_life_and_gives_it_back(
    tmp_path: Path, start_app: Callable[..., Any]
) -> None:
    """A process-wide setting (docs/configuration.md): what it was before the api started
    is what it is after the api stopped."""
    before = sys.getswitchinterval()
    settings = embedded_settings(tmp_path / "data", gil_switch_interval_ms=2.5)
    async with start_app(settings) as running:
        assert sys.getswitchinterval() == pytest.approx(0.0025)
        assert (await running.client.get("/healthz")).status_code == 200
    assert sys.getswitchinterval() == pytest.approx(before)
