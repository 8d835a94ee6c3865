"""Fault tests with kill -9: the api killed mid-ingest (embedded: SQLite, Qdrant Edge, the
in-process worker) and a separate worker killed mid-batch (PostgreSQL, Redis). Counted at
the end: messages sent, stored, indexed, memories and index points, each exactly once.

The embedder is a local stub (a real socket, vectors from a hash of the text), so that the
processes start in a second and the test can hold a batch in the middle of its embedding.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from fastapi import FastAPI, Request

from app.resources import open_resources
from app.settings import Settings
from app.stores.models import Memory, MemoryEvent
from tests.conftest import REDIS_URL, Running, full_settings
from tests.e2e.serving import free_port
from tests.stubs import serve

ROOT = Path(__file__).resolve().parents[2]
DIM = 64
BATCHES, PER_BATCH = 24, 25


@dataclass
class Stub:
    url: str = ""
    calls: int = 0
    hold: bool = False
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _vector(text: str) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    state = Stub()
    app = FastAPI()

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict[str, Any]:
        texts: list[str] = (await request.json())["input"]
        state.calls += 1
        if state.hold:
            state.held.set()
            await asyncio.wait_for(state.release.wait(), 300)
        return {"data": [{"index": i, "embedding": _vector(t)} for i, t in enumerate(texts)]}

    async with serve(app) as url:
        state.url = url
        yield state
        state.release.set()


def _strata_env(stub: Stub, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(
        STRATA_EMBEDDER="openai",
        STRATA_EMBEDDING_URL=stub.url,
        STRATA_EMBEDDING_MODEL="stub",
        STRATA_EMBEDDING_DIM=str(DIM),
        STRATA_LOG_FORMAT="text",
    )
    env.update({f"STRATA_{k.upper()}": v for k, v in values.items()})
    return env


def _settings_of(env: dict[str, str]) -> Settings:
    values = {k.removeprefix("STRATA_").lower(): v for k, v in env.items() if k[:7] == "STRATA_"}
    return Settings.model_validate({**values, "auto_migrate": False})


@pytest.fixture
def spawn(
    tmp_path: Path,
) -> Iterator[Callable[[str, list[str], dict[str, str]], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def logs(tmp_path: Path) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log"))
    )


async def until(what: str, check: Callable[[], Awaitable[bool]], tmp_path: Path) -> None:
    deadline = time.monotonic() + 120
    while not await check():
        assert time.monotonic() < deadline, f"{what} did not happen\n{logs(tmp_path)}"
        await asyncio.sleep(0.05)


def batches(tag: str) -> list[list[dict[str, str]]]:
    return [
        [
            {
                "id": f"b{b}-m{m}",
                "role": "user",
                "content": f"{tag} batch {b} item {m}: fact {b * 100 + m}",
            }
            for m in range(PER_BATCH)
        ]
        for b in range(BATCHES)
    ]


async def everything(client: httpx.AsyncClient, path: str, user: str) -> list[dict[str, Any]]:
    """Every item of a paged listing."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"user_id": user, "limit": 200}
    while True:
        page = (await client.get(path, params=params)).json()
        items.extend(page["items"])
        if not page.get("next_cursor"):
            return items
        params["cursor"] = page["next_cursor"]


async def test_the_api_killed_mid_ingest_loses_and_duplicates_nothing(
    stub: Stub,
    spawn: Callable[[str, list[str], dict[str, str]], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _strata_env(stub, data_dir=str(tmp_path / "data"))
    serve_args = ["-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)]
    sent = batches("api-kill")
    user, session = "u-kill", "s-kill"
    path = f"/v1/sessions/{session}/messages"

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def ready() -> bool:
            try:
                return (await client.get("/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        api = spawn("api-1", serve_args, env)
        await until("the api's start", ready, tmp_path)
        acknowledged: set[int] = set()
        queue = list(range(BATCHES))

        async def sender() -> None:
            while queue:
                b = queue.pop(0)
                try:
                    resp = await client.post(path, json={"user_id": user, "messages": sent[b]})
                except httpx.TransportError:
                    return  # the api is gone
                assert resp.status_code == 202, resp.text
                acknowledged.add(b)

        senders = [asyncio.create_task(sender()) for _ in range(4)]

        async def a_third() -> bool:
            return len(acknowledged) >= BATCHES // 3

        await until("a third of the batches", a_third, tmp_path)
        api.send_signal(signal.SIGKILL)  # with requests in flight
        assert await asyncio.to_thread(api.wait, 10) == -signal.SIGKILL
        await asyncio.gather(*senders)
        assert len(acknowledged) < BATCHES

        restarted = spawn("api-2", serve_args, env)
        await until("the api's restart", ready, tmp_path)
        # The client retries everything it sent; what was acknowledged is all there.
        for b, batch in enumerate(sent):
            resp = await client.post(path, json={"user_id": user, "messages": batch})
            assert resp.status_code == 202, resp.text
            body = resp.json()
            assert body["accepted"] + body["duplicates"] == PER_BATCH
            if b in acknowledged:
                assert body["duplicates"] == PER_BATCH
        waited = await client.get(
            f"/v1/sessions/{session}", params={"user_id": user, "wait": "true"}
        )
        stored = await everything(client, path, user)
        memories = await everything(client, "/v1/memories", user)

    total = BATCHES * PER_BATCH
    assert waited.json()["last_seq"] == total
    assert waited.json()["indexed_seq"] == total
    assert sorted(m["id"] for m in stored) == sorted(m["id"] for b in sent for m in b)
    sources = [s["message_id"] for m in memories for s in m["sources"]]
    assert len(memories) == total
    assert len(set(sources)) == total
    restarted.terminate()  # the index is closed before the test opens it
    # A clean stop (uvicorn re-raises the SIGTERM it handled).
    assert await asyncio.to_thread(restarted.wait, 30) in (0, -signal.SIGTERM)
    async with open_resources(_settings_of(env)) as resources:
        points = await resources.vectors.count()
    assert points == total
    print(  # the fault matrix's figures (docs/reliability.md)
        f"api kill -9: sent {total}, acknowledged before the kill "
        f"{len(acknowledged) * PER_BATCH}, stored {len(stored)}, indexed "
        f"{waited.json()['indexed_seq']}, memories {len(memories)}, points {points}"
    )


@pytest.fixture
async def api_without_worker(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[..., Any], stub: Stub
) -> AsyncIterator[Running]:
    settings = full_settings(
        await pg_databases(),
        worker_in_process=False,
        # No re-reads of the watermark while waiting: only the worker's signal, from its
        # own process over Redis pub/sub, can end a wait before its time-out.
        wait_poll_seconds=600,
        embedder="openai",
        embedding_url=stub.url,
        embedding_model="stub",
        embedding_dim=DIM,
    )
    async with start_app(settings) as running:
        yield running


async def test_a_worker_killed_mid_batch_is_taken_over_and_indexes_once(
    stub: Stub,
    api_without_worker: Running,
    spawn: Callable[[str, list[str], dict[str, str]], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    app = api_without_worker
    user, session = "u-wkill", "s-wkill"
    sent = batches("worker-kill")
    for batch in sent:
        resp = await app.client.post(
            f"/v1/sessions/{session}/messages", json={"user_id": user, "messages": batch}
        )
        assert resp.status_code == 202
    total = BATCHES * PER_BATCH

    env = _strata_env(
        stub,
        database_url=app.resources.settings.database_dsn,
        redis_url=REDIS_URL,
        qdrant_url=f"path:{tmp_path / 'qdrant'}",
        auto_migrate="false",
        worker_lease_seconds="2",
        worker_poll_seconds="0.2",
    )
    stub.hold = True
    victim = spawn("worker-1", ["-m", "app.worker"], env)

    async def held() -> bool:
        return stub.held.is_set()

    await until("the first batch's embedding", held, tmp_path)
    victim.send_signal(signal.SIGKILL)  # mid-batch: its slice embedded, nothing written
    assert await asyncio.to_thread(victim.wait, 10) == -signal.SIGKILL
    stub.hold = False
    stub.release.set()

    survivor = spawn("worker-2", ["-m", "app.worker"], env)
    waited = await app.client.get(
        f"/v1/sessions/{session}", params={"user_id": user, "wait": "true"}
    )
    assert waited.json()["indexed_seq"] == total, logs(tmp_path)
    survivor.terminate()
    assert await asyncio.to_thread(survivor.wait, 30) == 0

    async with app.resources.db.read() as tx:
        memories = await tx.scalar(
            sa.select(sa.func.count()).select_from(Memory).where(Memory.session_id == session)
        )
        created = await tx.scalar(
            sa.select(sa.func.count())
            .select_from(MemoryEvent)
            .where(MemoryEvent.user_id == user, MemoryEvent.event == "created")
        )
    async with open_resources(_settings_of(env)) as resources:
        points = await resources.vectors.count()
    assert (memories, created, points) == (total, total, total)
    print(
        f"worker kill -9: sent {total}, stored {waited.json()['last_seq']}, indexed "
        f"{waited.json()['indexed_seq']}, memories {memories}, created events {created}, "
        f"points {points}"
    )
