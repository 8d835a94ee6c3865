"""The README's run command starts the real server; ingest and recall over real HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "STRATA_DATA_DIR": str(tmp_path_factory.mktemp("e2e-data"))}
    env = {k: v for k, v in env.items() if not k.startswith("STRATA_") or k == "STRATA_DATA_DIR"}
    log = tmp_path_factory.mktemp("e2e-log") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ingest_then_recall_and_context_over_http(server: str) -> None:
    with httpx.Client(base_url=server, timeout=60) as client:
        ingest = client.post(
            "/v1/sessions/e2e-session/messages",
            json={
                "user_id": "e2e-user",
                "wait": True,
                "messages": [
                    {"id": "1", "role": "user", "content": "My cat Miso is afraid of thunder."},
                    {"id": "2", "role": "assistant", "content": "Poor Miso! Storms are scary."},
                    {"id": "3", "role": "user", "content": "我周末去杭州看西湖。"},
                ],
            },
        )
        assert ingest.status_code == 200, ingest.text
        assert ingest.json()["indexed_seq"] == 3

        recall = client.post(
            "/v1/recall",
            json={"user_id": "e2e-user", "query": "what scares the cat?", "top_k": 2},
        )
        assert recall.status_code == 200
        assert recall.json()["results"][0]["sources"][0]["message_id"] in {"1", "2"}
        chinese = client.post(
            "/v1/recall", json={"user_id": "e2e-user", "query": "西湖", "top_k": 1}
        )
        assert chinese.json()["results"][0]["sources"][0]["message_id"] == "3"

        ctx = client.post(
            "/v1/sessions/e2e-session/context", json={"user_id": "e2e-user", "token_budget": 50}
        )
        assert ctx.status_code == 200
        assert ctx.json()["tokens"]["total"] <= 50

        bad = client.post("/v1/recall", json={"user_id": "e2e-user"})
        assert bad.status_code == 422
        assert bad.headers["content-type"] == "application/problem+json"
        assert client.get("/openapi.json").json()["info"]["title"] == "Strata"
