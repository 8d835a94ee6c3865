"""The README's run command starts the real server; ingest and recall over real HTTP, and a
user's script on a generated client (docs/clients.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.serving import clean_env, free_port, serving

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server_and_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    port = free_port()
    env = clean_env(STRATA_DATA_DIR=str(tmp_path_factory.mktemp("e2e-data")))
    log = tmp_path_factory.mktemp("e2e-log") / "server.log"
    with serving(["make", "run", f"PORT={port}"], port, env, log) as url:
        yield url, log


@pytest.fixture(scope="module")
def server(server_and_log: tuple[str, Path]) -> str:
    return server_and_log[0]


def test_logs_are_json_lines_with_the_request_id(server_and_log: tuple[str, Path]) -> None:
    url, log = server_and_log
    rid = f"e2e-log-{uuid.uuid4().hex[:8]}"
    assert httpx.get(f"{url}/healthz", headers={"x-request-id": rid}).status_code == 200
    deadline = time.monotonic() + 10
    while True:
        entries = [orjson.loads(line) for line in log.read_text().splitlines() if line[:1] == "{"]
        mine = [e for e in entries if e.get("request_id") == rid]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert mine, log.read_text()[-2000:]
    assert mine[0]["logger"] == "uvicorn.access"
    assert "/healthz" in mine[0]["msg"]


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


def test_a_body_over_the_limit_is_a_413_over_real_http(server: str) -> None:
    """The client reads the 413 even though the server stops reading the body, whether it
    declared its length or streamed it in chunks."""
    body = orjson.dumps({"user_id": "u", "messages": [{"role": "user", "content": "x"}]})
    body = body[:-1] + b', "pad": "' + b"y" * (3 * 1024 * 1024) + b'"}'

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 65_536):
            yield body[i : i + 65_536]

    url = f"{server}/v1/sessions/e2e-big/messages"
    headers = {"content-type": "application/json"}
    for content in (body, chunks()):
        resp = httpx.post(url, content=content, headers=headers, timeout=30)
        assert resp.status_code == 413
        assert resp.json()["code"] == "request_too_large"
    assert httpx.get(f"{server}/v1/sessions/e2e-big", params={"user_id": "u"}).status_code == 404


def _generate(out: Path) -> None:
    """`strata_client` in `out`, as docs/clients.md says to generate it."""
    config = out / "config.json"
    config.write_text(json.dumps({"post_hooks": []}))  # no formatting: nothing reads it
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "openapi-python-client"),
            "generate",
            "--path",
            str(ROOT / "openapi" / "openapi.json"),
            "--output-path",
            str(out / "strata_client"),
            "--meta",
            "none",
            "--config",
            str(config),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_script_runs_on_the_generated_client(server: str, tmp_path: Path) -> None:
    _generate(tmp_path)
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python_client.py"), server],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert int(lines["ingested"]) >= 2
    assert "Lisbon" in lines["recalled"]
    total, budget = lines["context tokens"].split(" of ")
    assert 0 < int(total) <= int(budget) == 500
    assert lines["404"] == "session_not_found"
    assert lines["422"] == "validation_error ['top_k']"
