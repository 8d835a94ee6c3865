"""The full stack scaled out, as docs/scaling.md runs it: `python -m app.migrate` once, the
api as two uvicorn processes that do not migrate and share a PROMETHEUS_MULTIPROC_DIR, and a
worker of its own serving its metrics on a port; PostgreSQL and Redis.

No Qdrant server is reachable here: the api processes use qdrant-client's `:memory:` index
(ingest never searches it) and the worker a Qdrant Edge shard (docs/scaling.md §6)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from tests.conftest import REDIS_URL
from tests.e2e.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@contextmanager
def _process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("w") as out:
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.3)


def _total(text: str, sample: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_two_api_processes_and_a_worker_add_up(
    pg_databases: Callable[[], Awaitable[str]], redis_client: Redis, tmp_path: Path
) -> None:
    dsn = await pg_databases()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(
        STRATA_DATABASE_URL=dsn,
        STRATA_REDIS_URL=REDIS_URL,
        STRATA_WORKER_IN_PROCESS="false",
        STRATA_AUTH_MODE="open",  # loopback test processes; keys are tested in test_keys.py
        STRATA_AUTO_MIGRATE="false",
        STRATA_WORKER_POLL_SECONDS="0.2",
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.migrate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr

    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    api_port, worker_port = free_port(), free_port()
    api_env = {
        **env,
        "STRATA_QDRANT_URL": ":memory:",
        "STRATA_DATA_DIR": str(tmp_path / "api"),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }
    worker_env = {
        **env,
        # A worker may not open an Edge shard of its own (app.settings.refusal): its own
        # in-memory index stands in for the Qdrant server this machine lacks.
        "STRATA_QDRANT_URL": ":memory:",
        "STRATA_DATA_DIR": str(tmp_path / "worker"),
        "STRATA_WORKER_METRICS_PORT": str(worker_port),
    }
    api_args = [
        sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app",
        "--host", "127.0.0.1", "--port", str(api_port), "--workers", "2",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{api_port}"
    with ExitStack() as stack:
        api_log, worker_log = tmp_path / "api.log", tmp_path / "worker.log"
        api = stack.enter_context(_process(api_args, api_env, api_log))
        worker = stack.enter_context(
            _process([sys.executable, "-m", "app.worker"], worker_env, worker_log)
        )
        await asyncio.to_thread(_wait_for, f"{url}/readyz", api, api_log)
        await asyncio.to_thread(
            _wait_for, f"http://127.0.0.1:{worker_port}/metrics", worker, worker_log
        )

        sent = 12
        async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False) as client:
            for i in range(sent):
                resp = await client.post(
                    f"/v1/sessions/scale-{i % 3}/messages",
                    json={
                        "user_id": "scaled",
                        "messages": [{"role": "user", "content": f"Turn {i}: the ferry."}],
                        "wait": i == sent - 1,
                    },
                )
                assert resp.status_code == (200 if i == sent - 1 else 202), resp.text
            # Every session indexed by the worker (the last wait covered only its own).
            for _ in range(600):
                sessions = [
                    (await client.get(f"/v1/sessions/scale-{k}?user_id=scaled")).json()
                    for k in range(3)
                ]
                behind = [s for s in sessions if s["indexed_seq"] < s["last_seq"]]
                if not behind:
                    break
                await asyncio.sleep(0.2)
            assert not behind
            # Several scrapes: each may land on either process, and each reports both.
            texts = [(await client.get("/metrics")).text for _ in range(4)]
        # Files of both api processes are there to add up.
        pids = {p.name.rsplit("_", 1)[-1] for p in metrics_dir.glob("histogram_*.db")}
        assert len(pids) >= 2
        route = "/v1/sessions/{session_id}/messages"
        for text in texts:
            counted = _total(text, "strata_http_request_duration_seconds_count", route=route)
            assert counted == sent
            assert _total(text, "strata_index_lag_messages") == 0
        async with httpx.AsyncClient(trust_env=False) as scraper:
            worker_text = (await scraper.get(f"http://127.0.0.1:{worker_port}/metrics")).text
        assert _total(worker_text, "strata_promotion_batch_messages_sum") == sent
        assert _total(worker_text, "strata_embedding_texts_total", kind="bulk") >= sent
