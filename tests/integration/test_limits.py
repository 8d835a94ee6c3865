"""Request limits: the body size (declared or streamed) and the characters of one ingest
request, each a 413 naming its limit that stores nothing; what they leave allowed still
works (the longest message, and context eliding the middle of a last message too long)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import orjson

from tests.conftest import Running, turn

MIB = 1024 * 1024


def _ingest_body(user: str, chars: int, per_message: int = 32_000) -> bytes:
    messages = []
    while chars > 0:
        messages.append(turn("x" * min(chars, per_message)))
        chars -= per_message
    return orjson.dumps({"user_id": user, "messages": messages})


async def _nothing_stored(running: Running, session: str, user: str) -> None:
    check = await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})
    assert check.status_code == 404


async def test_a_body_over_the_limit_by_content_length_is_a_413(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    body = orjson.dumps({"user_id": user, "messages": [turn("hi")], "pad": "x" * (2 * MIB)})
    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        content=body,
        headers={"content-type": "application/json", "x-request-id": "too-big-1"},
    )
    assert resp.status_code == 413
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["code"] == "request_too_large"
    assert str(2 * MIB) in problem["detail"]
    assert problem["request_id"] == "too-big-1"
    await _nothing_stored(running, session, user)


async def test_a_streamed_body_is_counted_as_it_arrives(
    running: Running, ids: Callable[[str], str]
) -> None:
    """No `Content-Length` (chunked): the bytes are counted, not the header."""
    user, session = ids("user"), ids("session")
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"user_id": "' + user.encode() + b'", "messages": [{"role": "user", "content": "'
        for _ in range(64):  # 64 x 64 KiB = 4 MiB, twice the limit
            sent += 1
            yield b"y" * (64 * 1024)
        yield b'"}]}'

    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert "content-length" not in resp.request.headers
    assert resp.status_code == 413
    assert resp.json()["code"] == "request_too_large"
    await _nothing_stored(running, session, user)


async def test_a_body_under_the_limit_streamed_is_accepted(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    body = _ingest_body(user, 3 * 32_000)

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 10_000):
            yield body[i : i + 10_000]

    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 202, resp.text
    assert resp.json()["accepted"] == 3


async def test_more_characters_than_one_request_may_hold_is_a_413(
    running: Running, ids: Callable[[str], str]
) -> None:
    """1,000 messages of 32,000 characters (a 32 MB body) was accepted; one request now
    holds at most 200,000 characters, far under the body limit."""
    user, session = ids("user"), ids("session")
    body = _ingest_body(user, 200_001)
    assert len(body) < 2 * MIB
    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 413
    problem = resp.json()
    assert problem["code"] == "too_many_characters"
    assert "200001" in problem["detail"]
    assert "200000" in problem["detail"]
    assert problem["errors"][0]["field"] == "messages"
    await _nothing_stored(running, session, user)

    exactly = await running.client.post(
        f"/v1/sessions/{session}/messages",
        content=_ingest_body(user, 200_000),
        headers={"content-type": "application/json"},
    )
    assert exactly.status_code == 202, exactly.text
    assert exactly.json()["accepted"] == 7


async def test_the_longest_last_message_is_kept_and_elided_in_context(
    running: Running, ids: Callable[[str], str]
) -> None:
    """The caps leave one message of 32,000 characters allowed, and context still includes
    a last user message too long for the budget, its middle elided (`truncated`)."""
    user, session = ids("user"), ids("session")
    long = "begin " + "word " * 6_398 + "end"
    assert len(long) <= 32_000
    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        json={"user_id": user, "messages": [turn(long)]},
    )
    assert resp.status_code == 202, resp.text
    seq = resp.json()["last_seq"]
    context = await running.client.post(
        f"/v1/sessions/{session}/context",
        json={"user_id": user, "token_budget": 200, "query": "words"},
    )
    assert context.status_code == 200, context.text
    body = context.json()
    assert body["tokens"]["total"] <= 200
    assert body["truncated"] == {"recent_messages": [seq]}
    assert "begin" in body["text"]
    assert "end" in body["text"]
