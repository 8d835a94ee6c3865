"""Strata as an MCP server, driven by the official SDK's own client: streamable HTTP at `/mcp`
of a real server with keys, and stdio through `strata mcp`."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.serving import clean_env, free_port, serving, uvicorn

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin-secret-for-mcp-tests"
pytestmark = pytest.mark.e2e

TOOLS = {
    "remember",
    "recall",
    "get_context",
    "get_scratchpad",
    "set_scratchpad",
    "forget",
    "feedback",
}


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = clean_env(
        STRATA_DATA_DIR=str(tmp_path_factory.mktemp("mcp-data")),
        STRATA_AUTH_MODE="keys",
        STRATA_ADMIN_KEY=ADMIN,
    )
    log = tmp_path_factory.mktemp("mcp-log") / "server.log"
    with serving(uvicorn(port), port, env, log) as url:
        yield url


def _key(url: str, **body: Any) -> str:
    made = httpx.post(
        f"{url}/v1/admin/keys", json=body, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert made.status_code == 201, made.text
    key: str = made.json()["key"]
    return key


def _over_http(url: str, key: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


def _problem(result: Any) -> dict[str, Any]:
    assert result.is_error
    text = result.content[0].text  # the SDK's "Error executing tool <name>: " then ours
    problem: dict[str, Any] = json.loads(text[text.index("{") :])
    return problem


async def test_an_agent_remembers_and_recalls_over_http_with_a_key(keyed_server: str) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    key = _key(keyed_server, tenant=tenant, scopes=["read", "write"])
    async with _over_http(keyed_server, key) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= TOOLS
        assert all(len(t.description or "") > 60 for t in tools.values())

        stored = await client.call_tool(
            "remember",
            {
                "user_id": "ana",
                "session_id": "s1",
                "messages": [
                    {"role": "user", "content": "I moved to Lisbon last May.", "id": "m1"},
                    {"role": "assistant", "content": "How do you like it?", "id": "m2"},
                ],
                "wait": True,
            },
        )
        assert _data(stored)["accepted"] == 2
        again = await client.call_tool(
            "remember",
            {
                "user_id": "ana",
                "session_id": "s1",
                "messages": [
                    {"role": "user", "content": "I moved to Lisbon last May.", "id": "m1"}
                ],
            },
        )
        assert _data(again)["duplicates"] == 1

        found = _data(
            await client.call_tool(
                "recall", {"user_id": "ana", "query": "Which city did I move to?"}
            )
        )
        assert "Lisbon" in found["memories"][0]["content"]
        memory_id = found["memories"][0]["id"]

        context = _data(
            await client.call_tool(
                "get_context", {"user_id": "ana", "session_id": "s1", "token_budget": 400}
            )
        )
        assert "Lisbon" in context["text"]
        assert 0 < context["tokens"] <= 400

        notes = {"goal": "find a flat", "step": 2}
        put = await client.call_tool(
            "set_scratchpad", {"user_id": "ana", "session_id": "s1", "data": notes}
        )
        assert _data(put)["data"] == notes
        got = await client.call_tool("get_scratchpad", {"user_id": "ana", "session_id": "s1"})
        assert _data(got)["data"] == notes

        assert _data(await client.call_tool("feedback", {"user_id": "ana", "used": [memory_id]}))[
            "ok"
        ]
        assert _data(await client.call_tool("forget", {"user_id": "ana", "memory_id": memory_id}))[
            "ok"
        ]
        gone = await client.call_tool("forget", {"user_id": "ana", "memory_id": memory_id})
        assert _problem(gone)["code"] == "memory_not_found"

        missing = await client.call_tool("get_context", {"user_id": "ana", "session_id": "nope"})
        assert _problem(missing)["code"] == "session_not_found"
        invalid = await client.call_tool("recall", {"user_id": "ana", "query": "   "})
        assert _problem(invalid)["code"] == "validation_error"
        for args in (
            {"user_id": "ana", "session_id": ".."},
            {"user_id": "a\x00b", "session_id": "s1"},
        ):
            refused = _problem(await client.call_tool("get_scratchpad", args))
            assert refused["code"] == "validation_error"
            assert refused["errors"][0]["field"] in args


async def test_a_key_bound_to_a_user_and_a_read_only_key_stay_in_their_bounds(
    keyed_server: str,
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    writer = _key(keyed_server, tenant=tenant, scopes=["read", "write"])
    async with _over_http(keyed_server, writer) as client:
        for user, fact in (("ana", "My dog is called Pixel."), ("bob", "My cat is called Miso.")):
            await client.call_tool(
                "remember",
                {
                    "user_id": user,
                    "session_id": "s",
                    "messages": [{"role": "user", "content": fact}],
                    "wait": True,
                },
            )

    anas = _key(keyed_server, tenant=tenant, user_id="ana", scopes=["read"])
    async with _over_http(keyed_server, anas) as client:
        own = _data(await client.call_tool("recall", {"query": "What is my pet called?"}))
        assert any("Pixel" in m["content"] for m in own["memories"])
        assert not any("Miso" in m["content"] for m in own["memories"])
        other = await client.call_tool("recall", {"user_id": "bob", "query": "pet"})
        assert _problem(other)["code"] == "user_not_allowed"
        write = await client.call_tool(
            "remember",
            {"session_id": "s", "messages": [{"role": "user", "content": "I like tea."}]},
        )
        assert _problem(write)["code"] == "insufficient_scope"


def test_mcp_without_a_valid_key_is_a_401(keyed_server: str) -> None:
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):
        resp = httpx.post(
            f"{keyed_server}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
        assert resp.status_code == 401
        assert resp.json()["code"] == "unauthorized"


async def test_a_local_agent_uses_strata_over_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "strata"),
        args=["mcp"],
        env=clean_env(STRATA_DATA_DIR=str(tmp_path / "data")),
        cwd=str(ROOT),
    )
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= TOOLS
        await client.call_tool(
            "remember",
            {
                "user_id": "ana",
                "session_id": "s1",
                "messages": [{"role": "user", "content": "I am allergic to peanuts."}],
                "wait": True,
            },
        )
        found = _data(
            await client.call_tool("recall", {"user_id": "ana", "query": "What am I allergic to?"})
        )
        assert "peanuts" in found["memories"][0]["content"]
        missing = await client.call_tool("get_scratchpad", {"user_id": "ana", "session_id": "x"})
        assert _problem(missing)["code"] == "session_not_found"
