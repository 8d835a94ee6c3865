"""The scratchpad: a session's working memory in its buffer, shown in the context."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.stores.buffer import _scratchpad_key, _window_key
from tests.conftest import Running, post_messages, turn


def path(session: str) -> str:
    return f"/v1/sessions/{session}/scratchpad"


async def get_pad(running: Running, session: str, user: str, expect: int = 200) -> dict[str, Any]:
    resp = await running.client.get(path(session), params={"user_id": user})
    assert resp.status_code == expect, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def put_pad(
    running: Running, session: str, user: str, data: Any, expect: int = 200
) -> dict[str, Any]:
    resp = await running.client.put(path(session), json={"user_id": user, "data": data})
    assert resp.status_code == expect, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def test_put_get_delete_and_the_context_shows_it(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("Book me a flight to Porto.")], wait=False)
    empty = await get_pad(running, session, user)
    ttl = running.resources.settings.buffer_ttl_seconds
    assert empty == {"session_id": session, "data": {}, "updated_at": None, "ttl_seconds": ttl}

    data = {"goal": "flight to Porto", "step": 2, "options": ["TP 1234", "FR 88"], "备注": "靠窗"}
    put = await put_pad(running, session, user, data)
    assert put["data"] == data
    assert put["updated_at"] is not None
    got = await get_pad(running, session, user)
    assert got["data"] == data
    assert list(got["data"]) == list(data)
    assert got["updated_at"] == put["updated_at"]

    context = await running.client.post(f"/v1/sessions/{session}/context", json={"user_id": user})
    assert context.status_code == 200, context.text
    body = context.json()
    assert body["sections"]["working_memory"] == data
    assert (
        "## Working memory\n- goal: flight to Porto\n- step: 2\n"
        '- options: ["TP 1234", "FR 88"]\n- 备注: 靠窗\n\n'
    ) in body["text"]
    assert body["tokens"]["working_memory"] > 0

    replaced = await put_pad(running, session, user, {"step": 3})
    assert replaced["data"] == {"step": 3}  # PUT replaces the whole object
    deleted = await running.client.delete(path(session), params={"user_id": user})
    assert deleted.status_code == 204
    assert (await get_pad(running, session, user))["data"] == {}


async def test_only_the_owner_of_an_existing_session(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await running.client.put(f"/v1/sessions/{session}", json={"user_id": user})
    for who, where in ((ids("intruder"), session), (user, ids("nope"))):
        assert (await get_pad(running, where, who, expect=404))["code"] == "session_not_found"
        put = await put_pad(running, where, who, {"a": 1}, expect=404)
        assert put["code"] == "session_not_found"
        resp = await running.client.delete(path(where), params={"user_id": who})
        assert resp.status_code == 404
    assert (await get_pad(running, session, user))["data"] == {}


async def test_size_and_strict_json_limits(running: Running, ids: Callable[[str], str]) -> None:
    user, session = ids("user"), ids("session")
    await running.client.put(f"/v1/sessions/{session}", json={"user_id": user})
    limit = running.resources.settings.scratchpad_max_bytes
    too_big = await put_pad(running, session, user, {"notes": "x" * limit}, expect=413)
    assert too_big["code"] == "scratchpad_too_large"
    assert str(limit) in too_big["detail"]
    await put_pad(running, session, user, {"notes": "x" * (limit - 20)})
    for bad in ([1, 2], "text", None):
        resp = await put_pad(running, session, user, bad, expect=422)
        assert resp["errors"][0]["field"] == "data"
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(10):
        inner["k"] = {}
        inner = inner["k"]
    assert (await put_pad(running, session, user, deep, expect=422))["code"] == "validation_error"
    extra = await running.client.put(
        path(session), json={"user_id": user, "data": {}, "merge": True}
    )
    assert extra.status_code == 422
    assert len((await get_pad(running, session, user))["data"]["notes"]) == limit - 20


@pytest.mark.parametrize("mode_app", ["full"], indirect=True)
async def test_it_lives_and_dies_with_the_session_buffer(
    mode_app: Running, ids: Callable[[str], str]
) -> None:
    running = mode_app
    user, session = ids("user"), ids("session")
    tenant = running.resources.settings.default_tenant
    ttl = running.resources.settings.buffer_ttl_seconds
    redis = running.resources.buffer.redis
    pad, window = _scratchpad_key(tenant, user, session), _window_key(tenant, user, session)
    # One hash slot with the window
    assert pad == f"strata:{{{tenant}/{user}/{session}}}:scratchpad"
    assert window == f"strata:{{{tenant}/{user}/{session}}}:window"

    await post_messages(running, session, user, [turn("hello")], wait=False)
    await put_pad(running, session, user, {"plan": "a"})
    assert ttl - 5 <= await redis.ttl(pad) <= ttl

    # Reading it refreshes both; so does the window's activity.
    await redis.expire(pad, 100)
    await redis.expire(window, 100)
    await get_pad(running, session, user)
    assert await redis.ttl(pad) > 100
    assert await redis.ttl(window) > 100
    await redis.expire(pad, 100)
    await post_messages(running, session, user, [turn("again")], wait=False)
    assert await redis.ttl(pad) > 100

    # Expired or flushed, it reads back empty, never a 500; the context still packs.
    await redis.delete(pad)
    assert (await get_pad(running, session, user))["data"] == {}
    await put_pad(running, session, user, {"plan": "b"})
    await redis.flushdb()
    assert (await get_pad(running, session, user))["data"] == {}
    context = await running.client.post(f"/v1/sessions/{session}/context", json={"user_id": user})
    assert context.status_code == 200
    assert context.json()["sections"]["working_memory"] == {}

    # Deleting the session drops it.
    await put_pad(running, session, user, {"plan": "c"})
    deleted = await running.client.delete(f"/v1/sessions/{session}", params={"user_id": user})
    assert deleted.status_code == 200
    assert await redis.exists(pad) == 0
