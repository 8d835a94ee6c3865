"""`/metrics`: Prometheus text with per-route latency, index lag, promotion, embedding and
job figures, memories by type; its token; several processes adding up; the worker's port."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from redis.asyncio import Redis

from app.metrics import Metrics
from app.services.metrics import MetricsService
from app.stores.db import Database, create_engine
from tests.conftest import Running, embedded_settings, full_settings, turn

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str, name: str) -> list[Sample]:
    """Every sample of the family `name` (a histogram's buckets, count and sum too)."""
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return list(family.samples)
    return []


def value(text: str, name: str, **labels: str) -> float | None:
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(found) if found else None


async def scrape(running: Running, **headers: str) -> str:
    resp = await running.client.get("/metrics", headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return resp.text


@pytest.mark.parametrize("running", ["full", "embedded"], indirect=True)
async def test_latency_is_labelled_by_route_template_and_status(
    running: Running, ids: Callable[[str], str]
) -> None:
    session, user = ids("s"), ids("u")
    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        json={"user_id": user, "messages": [turn("I keep bees in Porto.")], "wait": True},
    )
    assert resp.status_code == 200
    resp = await running.client.post("/v1/recall", json={"user_id": user, "query": "bees"})
    assert resp.status_code == 200
    resp = await running.client.get(
        "/v1/memories/00000000-0000-0000-0000-000000000000", params={"user_id": user}
    )
    assert resp.status_code == 404
    assert (await running.client.get(f"/no/such/{session}")).status_code == 404
    assert (await running.client.request("BREW", "/v1/recall")).status_code == 405

    text = await scrape(running)
    name = "strata_http_request_duration_seconds_count"
    ingest = value(
        text, name, method="POST", route="/v1/sessions/{session_id}/messages", status="200"
    )
    assert ingest is not None
    assert ingest >= 1
    assert value(text, name, method="POST", route="/v1/recall", status="200")
    assert value(text, name, method="GET", route="/v1/memories/{memory_id}", status="404")
    assert value(text, name, method="GET", route="<unmatched>", status="404")
    # An unknown verb is one series, not one per verb a scanner tries.
    assert value(text, name, method="OTHER", route="/v1/recall", status="405")
    assert value(text, name, method="BREW") is None
    # The raw path never becomes a label: a series per session would grow without bound.
    routes = {s.labels.get("route", "") for s in samples(text, name.removesuffix("_count"))}
    assert not any(session in route for route in routes)
    # The histogram has the buckets of the service levels.
    assert value(
        text,
        "strata_http_request_duration_seconds_bucket",
        route="/v1/recall",
        status="200",
        le="+Inf",
    )


@pytest.mark.parametrize("running", ["full", "embedded"], indirect=True)
async def test_embedding_and_promotion_are_counted(
    running: Running, ids: Callable[[str], str]
) -> None:
    session, user = ids("s"), ids("u")
    before = await scrape(running)
    messages = [turn(f"Note {i}: the hive by the lemon tree.") for i in range(5)]
    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        json={"user_id": user, "messages": messages, "wait": True},
    )
    assert resp.status_code == 200
    await running.client.post("/v1/recall", json={"user_id": user, "query": "hive"})
    after = await scrape(running)

    def grew(name: str, **labels: str) -> float:
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert grew("strata_embedding_batch_size_count", kind="query") >= 1
    assert grew("strata_embedding_texts_total", kind="bulk") >= 5
    assert grew("strata_promotion_batch_messages_sum") >= 5
    assert grew("strata_promotion_batch_duration_seconds_count") >= 1
    assert "# TYPE strata_job_duration_seconds histogram" in after


async def test_the_worker_trims_the_heap_when_idle_after_a_backlog(
    start_app: Callable[[Any], Any], tmp_path: Path
) -> None:
    """`STRATA_TRIM_AFTER_MESSAGES`: once that many are promoted and the worker finds no
    more work, it gives the free heap back (app/malloc.py), and counts it."""
    settings = embedded_settings(tmp_path, trim_after_messages=3)
    async with start_app(settings) as running:
        assert value(await scrape(running), "strata_heap_trims_total") == 0
        resp = await running.client.post(
            "/v1/sessions/trim/messages",
            json={
                "user_id": "tia",
                "messages": [turn(f"note {i}") for i in range(3)],
                "wait": True,
            },
        )
        assert resp.status_code == 200
        for _ in range(100):  # the worker's next pass finds nothing, then trims
            if value(await scrape(running), "strata_heap_trims_total"):
                break
            await asyncio.sleep(0.1)
        assert value(await scrape(running), "strata_heap_trims_total") == 1


@pytest.fixture(scope="module")
async def idle_app(
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    start_app: Callable[[Any], Any],
) -> AsyncIterator[Running]:
    """A database of its own and no worker: what is ingested stays behind the index."""
    settings = full_settings(
        await pg_databases(), worker_in_process=False, metrics_token="scrape-me"
    )
    async with start_app(settings) as running:
        yield running


async def test_index_lag_and_memories_by_type(idle_app: Running) -> None:
    auth = {"authorization": "Bearer scrape-me"}
    text = await scrape(idle_app, **auth)
    assert value(text, "strata_scrape_sql_up") == 1
    assert value(text, "strata_index_lag_messages") is None  # nothing behind yet

    for session, count in (("lag-a", 3), ("lag-b", 2)):
        resp = await idle_app.client.post(
            f"/v1/sessions/{session}/messages",
            json={"user_id": "lagging", "messages": [turn(f"m{i}") for i in range(count)]},
        )
        assert resp.status_code == 202
    for kind in ("semantic", "semantic", "procedural"):
        resp = await idle_app.client.post(
            "/v1/memories",
            json={"user_id": "lagging", "content": f"a {kind} fact", "memory_type": kind},
        )
        assert resp.status_code == 201

    text = await scrape(idle_app, **auth)
    assert value(text, "strata_index_lag_messages", tenant="default") == 5
    assert value(text, "strata_index_lag_sessions", tenant="default") == 2
    assert value(text, "strata_memories", tenant="default", type="semantic") == 2
    assert value(text, "strata_memories", tenant="default", type="procedural") == 1
    assert value(text, "strata_memories", type="episodic") is None


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong", "Basic c2NyYXBlLW1l", "Bearer scrape-me-not"]
)
async def test_the_token_guards_metrics(idle_app: Running, header: str | None) -> None:
    headers = {"authorization": header} if header else {}
    resp = await idle_app.client.get("/metrics", headers=headers)
    assert resp.status_code == 401
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["code"] == "unauthorized"
    assert "strata_" not in resp.text


async def test_without_a_token_metrics_are_open(full_app: Running) -> None:
    assert "strata_http_request_duration_seconds" in await scrape(full_app)


_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from app.metrics import Metrics
    m = Metrics(Path(sys.argv[1]))
    if sys.argv[2] == "observe":
        m.requests.labels("GET", "/v1/recall", "200").observe(0.004)
        m.embedding_texts.labels("query").inc(3)
    else:
        sys.stdout.write(m.render([], []).decode())
    """
)


def test_processes_sharing_a_multiprocess_dir_add_up(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def child(action: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(tmp_path), action],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    child("observe")
    child("observe")
    text = child("render")  # a third process, as a scrape of any api process would be
    assert value(text, "strata_http_request_duration_seconds_count", route="/v1/recall") == 2
    assert value(text, "strata_embedding_texts_total", kind="query") == 6


def test_a_multiprocess_dir_set_too_late_is_refused(tmp_path: Path) -> None:
    # prometheus_client chose in-memory values when this process imported it.
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR"):
        Metrics(tmp_path)


def test_the_worker_serves_its_metrics_on_a_port() -> None:
    metrics = Metrics()
    metrics.observe_promotion(0.2, 40)
    metrics.observe_promotion(0.1, 0)  # an idle pass is not a batch
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = metrics.serve(port, addr="127.0.0.1")
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        server.shutdown()
        server.server_close()
    assert value(text, "strata_promotion_batch_messages_count") == 1
    assert value(text, "strata_promotion_batch_messages_sum") == 40


async def test_with_the_database_down_the_process_figures_still_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    db = Database(create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{closed}/none"))
    metrics = Metrics()
    metrics.observe_request("GET", "/v1/recall", 200, 0.003)
    try:
        text = (await MetricsService(db, metrics).exposition()).decode()
    finally:
        await db.close()
    assert value(text, "strata_scrape_sql_up") == 0
    assert value(text, "strata_http_request_duration_seconds_count", route="/v1/recall") == 1
    assert "strata_index_lag_messages" not in text  # absent, never a false zero
