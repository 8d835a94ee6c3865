"""Operational honesty: a configuration that cannot work is refused at start; `/readyz`
tells index lag and whether a worker is alive; a frozen Redis costs a time-out once, then is
skipped, and every request degrades to the log."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from app.jobs.registry import JobContext, Registry
from app.main import create_app
from app.settings import RefusedConfiguration, Settings
from app.stores import jobs as job_store
from app.worker import finish, run_worker
from tests.conftest import Running, embedded_settings, full_settings, post_messages, turn
from tests.e2e.serving import free_port

ROOT = Path(__file__).resolve().parents[2]


def _env(**strata: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update({f"STRATA_{k.upper()}": v for k, v in strata.items()})
    return env


def test_the_api_refuses_a_separate_worker_on_the_edge_index(tmp_path: Path) -> None:
    with pytest.raises(RefusedConfiguration, match="STRATA_WORKER_IN_PROCESS=false"):
        create_app(embedded_settings(tmp_path, worker_in_process=False))
    # As an operator meets it: the server exits at once, saying why.
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", "0"],
        cwd=ROOT,
        env=_env(data_dir=str(tmp_path), worker_in_process="false"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "refusing to start" in done.stderr
    assert "STRATA_QDRANT_URL" in done.stderr
    assert not (tmp_path / "qdrant").exists()  # refused before opening anything


def test_the_worker_refuses_the_edge_index(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.worker"],
        cwd=ROOT,
        env=_env(data_dir=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "refusing to start" in done.stderr
    assert "cannot run as its own process" in done.stderr


@pytest.fixture
async def workerless(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[..., Any]
) -> AsyncIterator[Running]:
    settings = full_settings(
        await pg_databases(),
        worker_in_process=False,
        worker_stale_seconds=0.5,
        worker_heartbeat_seconds=0.1,
    )
    async with start_app(settings) as running:
        yield running


async def test_readyz_reports_index_lag_and_the_worker(workerless: Running) -> None:
    client = workerless.client
    idle = await client.get("/readyz")
    assert idle.status_code == 200, idle.text
    assert idle.json()["index"] == {"lag_messages": 0, "sessions_behind": 0}
    assert idle.json()["worker"] == {"alive": False, "heartbeat_age_seconds": None}

    await post_messages(workerless, "s1", "u1", [turn("one"), turn("two")], wait=False)
    await post_messages(workerless, "s2", "u2", [turn("three")], wait=False)
    await asyncio.sleep(0.6)  # past the grace a worker gets to show up
    stuck = await client.get("/readyz")
    assert stuck.status_code == 503  # messages wait and no worker will ever index them
    assert stuck.json()["index"] == {"lag_messages": 3, "sessions_behind": 2}
    assert stuck.json()["checks"]["database"]["ok"]

    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(workerless.state["container"], stop))
    try:
        deadline = time.monotonic() + 120
        while True:
            body = (await client.get("/readyz")).json()
            if body["index"]["lag_messages"] == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert body["ready"] is True
        assert body["worker"]["alive"] is True
        assert body["worker"]["heartbeat_age_seconds"] is not None
    finally:
        stop.set()
        await worker
    # A worker that stopped cleanly removes its heartbeat.
    gone = (await client.get("/readyz")).json()
    assert gone["worker"]["heartbeat_age_seconds"] is None


class _HangingEmbedder:
    """The bundled embedder, except that a background (promotion) batch never returns: a
    model call that hangs. Records that it was cancelled."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id, self.dim, self.local = inner.model_id, inner.dim, inner.local
        self.entered = asyncio.Event()
        self.cancelled = False

    async def embed(
        self, texts: Any, *, bulk: bool = False, query: bool = False
    ) -> list[list[float]]:
        if not bulk:
            result: list[list[float]] = await self.inner.embed(texts)
            return result
        self.entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self.inner.close()


async def test_a_worker_cancelled_mid_pass_cancels_its_running_jobs(workerless: Running) -> None:
    """A shutdown past its grace cancels the worker inside a promotion pass that hangs; the
    job it runs beside hangs too. The worker must end anyway (its jobs cancelled with it),
    within `finish`'s bound, not be left behind waiting on the job."""
    resources = workerless.resources
    kind = f"test.hang.{uuid.uuid4().hex[:8]}"
    job_started, job_cancelled = asyncio.Event(), asyncio.Event()

    async def hang(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        job_started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            job_cancelled.set()
            raise
        return {}

    registry = Registry()
    registry.add(kind, hang)
    now = datetime.now(UTC)
    async with resources.db.transaction() as tx:
        await job_store.enqueue(
            tx,
            tenant_id="t-hang",
            kind=kind,
            key="k",
            payload={},
            due_at=now,
            max_attempts=1,
            now=now,
        )
    embedder = _HangingEmbedder(resources.embedder)
    resources.embedder = embedder
    try:
        await post_messages(workerless, "s-hang", "u-hang", [turn("never indexed")], wait=False)
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker(workerless.state["container"], stop, registry))
        await asyncio.wait_for(asyncio.gather(embedder.entered.wait(), job_started.wait()), 60)
        stop.set()
        await finish(worker, grace=2.0)  # the pass's own clean-up gets as long again
        assert worker.done(), "finish left the worker behind, waiting on its job"
        assert worker.cancelled()
        assert embedder.cancelled
        assert job_cancelled.is_set()
    finally:
        resources.embedder = embedder.inner


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of the test's own, to freeze with SIGSTOP; always thawed and ended."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        proc.wait(timeout=10)


async def test_a_frozen_redis_is_skipped_and_requests_degrade_to_the_log(
    pg_databases: Callable[[], Awaitable[str]],
    start_app: Callable[..., Any],
    own_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, redis_server = own_redis
    settings = full_settings(await pg_databases(), redis_url=url, redis_retry_seconds=60)
    async with start_app(settings) as app:
        client = app.client
        await post_messages(app, "s", "u", [turn("before the freeze", id="m0")])
        redis_server.send_signal(signal.SIGSTOP)
        try:
            timings: list[float] = []
            for i in range(1, 6):
                start = time.perf_counter()
                # A hang guard only (the default client would wait forever or 5 s a call).
                posted = await asyncio.wait_for(
                    client.post(
                        "/v1/sessions/s/messages",
                        json={
                            "user_id": "u",
                            "wait": True,
                            "messages": [{"id": f"m{i}", "role": "user", "content": f"frozen {i}"}],
                        },
                    ),
                    30,
                )
                assert posted.status_code == 200, posted.text
                assert posted.json()["indexed_seq"] == i + 1
                context = await asyncio.wait_for(
                    client.post("/v1/sessions/s/context", json={"user_id": "u"}), 30
                )
                assert context.status_code == 200, context.text
                recent = context.json()["sections"]["recent_messages"]
                assert recent[-1]["content"] == f"frozen {i}"  # read from the log
                timings.append(time.perf_counter() - start)
                # After the first time-out Redis is skipped: no call waits on it again.
                assert app.resources.buffer.breaker.open
            ready = await client.get("/readyz")
            assert ready.status_code == 503
            assert not ready.json()["checks"]["buffer"]["ok"]
            print("frozen Redis, ingest wait=true + context, seconds:", timings)
        finally:
            redis_server.send_signal(signal.SIGCONT)
        # Thawed: once the retry window ends, Redis is used again.
        app.resources.buffer.breaker.retry_seconds = 0
        app.resources.buffer.breaker._skip_until = 0
        probe = Redis.from_url(url)
        try:
            assert await probe.ping()
        finally:
            await probe.aclose()
        assert (await client.get("/readyz")).json()["checks"]["buffer"]["ok"]


async def test_start_up_is_frozen_out_of_the_collectors_reach_when_asked(
    start_app: Callable[..., Any], tmp_path: Path
) -> None:
    """`gc_freeze` (on by default; off in this test process, see tests/conftest.py): once
    the app is up, what start-up built is frozen, so no full collection walks it."""
    assert Settings.model_fields["gc_freeze"].default is True
    gc.unfreeze()
    try:
        async with start_app(embedded_settings(tmp_path / "off", gc_freeze=False)):
            assert gc.get_freeze_count() == 0
        async with start_app(embedded_settings(tmp_path / "on", gc_freeze=True)):
            assert gc.get_freeze_count() > 10_000  # the modules alone are more
    finally:
        gc.unfreeze()
