"""Shared fixtures: apps on real stores, in both run modes.

- `full`: PostgreSQL (a fresh database per test run, migrated by Alembic), Redis (a
  dedicated logical database, flushed first), the Qdrant server code path through
  qdrant-client's local mode, and the worker in-process.
- `embedded`: SQLite, Qdrant Edge and the in-process Redis stand-in, in a temporary dir.

Tests isolate themselves with fresh user and session ids, so one app serves many tests.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from hypothesis import settings as hypothesis_settings
from redis.asyncio import Redis
from sqlalchemy import event
from sqlalchemy.engine import Engine

from app.main import create_app
from app.resources import Resources
from app.settings import Settings
from tests import tenancy

# Every statement the app sends is checked for its tenant scope (tests/tenancy.py).
event.listen(Engine, "before_cursor_execute", tenancy.record)


@pytest.fixture(autouse=True)
def _tenant_scoped_queries_only() -> Iterator[None]:
    """Fails the test in whose time the app sent a query on a tenant table without
    `tenant_id` (a background worker's included), unless its sender is allow-listed."""
    seen = len(tenancy.violations)
    yield
    new = tenancy.violations[seen:]
    assert not new, "unscoped queries:\n" + "\n".join(sorted({str(v) for v in new}))


# A test that hangs must fail the run within minutes and say where, not use up CI's 90.
# The whole protocol of a test (set-up, call, tear-down) gets this long. The timer needs the
# GIL; for a hang inside an extension that holds it, pytest's `faulthandler_timeout`
# (pyproject.toml, a minute later) dumps the threads from C.
# A test process starts hundreds of apps: with start-up frozen (`gc.freeze`), the cycles
# of those that ended would never be collected. The freeze has tests of its own, which
# ask for it (tests/unit/test_memory.py, tests/integration/test_operations.py).
os.environ.setdefault("STRATA_GC_FREEZE", "false")

TEST_TIME_LIMIT = float(os.environ.get("STRATA_TEST_TIME_LIMIT", "600"))


def _hang_report(item: pytest.Item) -> None:
    """Prints every thread's stack and, the useful part for async code, the stack of every
    task pending on a running event loop, then ends the run: a hung loop cannot be
    interrupted cleanly from another thread. Whatever fails in the report, the run ends."""
    try:
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend(in_=False)  # the report goes to the real stderr
        out = sys.__stderr__ or sys.stderr
        print(
            f"\n*** {item.nodeid} exceeded {TEST_TIME_LIMIT:.0f} s (its set-up and tear-down "
            "included, session fixtures' too): stacks follow ***",
            file=out,
        )
        faulthandler.dump_traceback(file=out, all_threads=True)
        loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
        for loop in loops:
            if not loop.is_running():
                continue
            tasks: list[asyncio.Task[Any]] = []
            for _ in range(3):  # the set of tasks may change while it is read
                try:
                    tasks = list(asyncio.all_tasks(loop))
                    break
                except RuntimeError:
                    continue
            for task in tasks:
                print(f"--- {task!r}", file=out)
                task.print_stack(file=out)
        # What the test's own processes logged (the kill tests write them beside their data).
        tmp = getattr(item, "funcargs", {}).get("tmp_path")
        if isinstance(tmp, Path):
            for log_file in sorted(tmp.glob("*.log")):
                text = log_file.read_text(errors="replace")[-4000:]
                print(f"--- {log_file.name}\n{text}", file=out)
        out.flush()
    finally:
        os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    timer = threading.Timer(TEST_TIME_LIMIT, _hang_report, args=(item,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


# No per-example deadline: the first example may load jieba's dictionary (about a second),
# and CI machines are slower than ours. Property tests assert behaviour, not speed.
hypothesis_settings.register_profile("strata", deadline=None)
hypothesis_settings.load_profile("strata")

PG_ADMIN_DSN = os.environ.get("STRATA_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _redis_url() -> str:
    """`STRATA_TEST_REDIS` (default database 13), one logical database further for each
    parallel worker (`make test` runs two, pytest-xdist's `gw0`, `gw1`): a worker's session
    flushes its own database, never the one another worker is using."""
    base = os.environ.get("STRATA_TEST_REDIS", "redis://127.0.0.1:6379/13")
    offset = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    prefix, _, db = base.rpartition("/")
    if not offset or not db.isdigit():
        return base
    return f"{prefix}/{(int(db) + offset) % 16}"


REDIS_URL = _redis_url()


def _pg_dsn(database: str) -> str:
    base = PG_ADMIN_DSN.rsplit("/", 1)[0]
    return f"{base.replace('postgresql://', 'postgresql+asyncpg://', 1)}/{database}"


@pytest.fixture(scope="session")
async def pg_databases() -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """Makes fresh PostgreSQL databases for this run; drops them at the end."""
    made: list[str] = []

    async def make() -> str:
        name = f"strata_test_{uuid.uuid4().hex[:10]}"
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        made.append(name)
        return _pg_dsn(name)

    yield make
    # Together: each drop waits for a checkpoint (~1 s on PostgreSQL 15), and concurrent
    # drops share theirs; one after the other, a run's ~50 databases took ~55 s.
    limit = asyncio.Semaphore(8)

    async def drop(name: str) -> None:
        async with limit:
            conn = await asyncpg.connect(PG_ADMIN_DSN)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await conn.close()

    await asyncio.gather(*(drop(name) for name in made))


@pytest.fixture(scope="session")
async def pg_database(pg_databases: Callable[[], Awaitable[str]]) -> str:
    return await pg_databases()


@pytest.fixture(scope="session")
async def redis_client() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


def full_settings(pg: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": pg,
        "redis_url": REDIS_URL,
        "qdrant_url": ":memory:",
        "worker_in_process": True,
        "worker_poll_seconds": 0.2,
        "wait_timeout_seconds": 180,  # generous: a slow CI machine must not flake
        "data_dir": Path("/nonexistent-full-stack-uses-no-files"),
        # The full stack requires keys; tests of the gate start apps of their own with keys.
        "auth_mode": "open",
        # Shared apps hold old imported histories: a sweep at start would forget them.
        # Forgetting tests turn it on for apps (or users) of their own.
        "forgetting_enabled": False,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


def embedded_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "worker_poll_seconds": 0.2,
        "wait_timeout_seconds": 180,
        "forgetting_enabled": False,  # as full_settings
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


class Running:
    """An app with its lifespan entered, and a client on it."""

    def __init__(self, app: FastAPI, client: httpx.AsyncClient, state: dict[str, Any]) -> None:
        self.app = app
        self.client = client
        self.state = state

    @property
    def resources(self) -> Resources:
        resources: Resources = self.state["resources"]
        return resources


@pytest.fixture(scope="session")
def start_app() -> Callable[[Settings], Any]:
    """Start an app on the given settings: `async with start_app(s) as running: ...`."""
    import contextlib

    @contextlib.asynccontextmanager
    async def start(settings: Settings) -> AsyncIterator[Running]:
        app = create_app(settings)
        async with LifespanManager(app, startup_timeout=60, shutdown_timeout=60) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://strata") as client:
                yield Running(app, client, manager._state)

    return start


@pytest.fixture(scope="session")
async def full_app(
    pg_database: str, redis_client: Redis, start_app: Callable[[Settings], Any]
) -> AsyncIterator[Running]:
    async with start_app(full_settings(pg_database)) as running:
        yield running


@pytest.fixture(scope="session")
async def embedded_app(
    tmp_path_factory: pytest.TempPathFactory, start_app: Callable[[Settings], Any]
) -> AsyncIterator[Running]:
    async with start_app(embedded_settings(tmp_path_factory.mktemp("embedded"))) as running:
        yield running


@pytest.fixture(scope="session")
async def pg_edge_app(
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    tmp_path_factory: pytest.TempPathFactory,
    start_app: Callable[[Settings], Any],
) -> AsyncIterator[Running]:
    """PostgreSQL and Redis with Qdrant Edge: the full stack's SQL and buffer paths at a
    scale qdrant-client's local mode (Python-evaluated filters) cannot serve."""
    # Its own database: a worker of another app sharing it would index into another store.
    settings = full_settings(
        await pg_databases(), qdrant_url=None, data_dir=tmp_path_factory.mktemp("pg-edge")
    )
    async with start_app(settings) as running:
        yield running


@pytest.fixture
def mode_app(request: pytest.FixtureRequest) -> Running:
    """The app of the mode given by indirect parametrisation: full, embedded or pg_edge."""
    fixture: Running = request.getfixturevalue(f"{request.param}_app")
    return fixture


@pytest.fixture(params=["full", "embedded"])
def running(request: pytest.FixtureRequest) -> Running:
    """Each test that takes `running` runs once per mode."""
    fixture: Running = request.getfixturevalue(f"{request.param}_app")
    return fixture


@pytest.fixture
def ids() -> Callable[[str], str]:
    """Fresh identifiers, so tests sharing an app never see each other's data."""
    suffix = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{suffix}"


async def settle(running: Running) -> None:
    """Let background reinforcement finish."""
    services = running.state["services"]
    await services.recall.drain()
    await asyncio.sleep(0)


def turn(content: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


async def post_messages(
    running: Running,
    session_id: str,
    user_id: str,
    messages: list[dict[str, Any]],
    *,
    wait: bool = True,
    expect: int | None = None,
) -> dict[str, Any]:
    resp = await running.client.post(
        f"/v1/sessions/{session_id}/messages",
        json={"user_id": user_id, "messages": messages, "wait": wait},
    )
    expected = expect if expect is not None else (200 if wait else 202)
    assert resp.status_code == expected, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def recall(running: Running, user_id: str, query: str, **extra: Any) -> list[dict[str, Any]]:
    resp = await running.client.post(
        "/v1/recall", json={"user_id": user_id, "query": query, "reinforce": False, **extra}
    )
    assert resp.status_code == 200, resp.text
    results: list[dict[str, Any]] = resp.json()["results"]
    return results
