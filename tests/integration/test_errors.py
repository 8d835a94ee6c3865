"""Bad input is a 4xx problem+json naming the field, and a rejected request stores nothing."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from tests.conftest import Running, turn

FUTURE = (datetime.now(UTC) + timedelta(hours=1)).isoformat()

BAD_MESSAGES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown field", {"messages": [turn("hi", colour="red")]}, "messages.0.colour"),
    ("blank content", {"messages": [turn("   ")]}, "messages.0.content"),
    ("empty content", {"messages": [turn("")]}, "messages.0.content"),
    ("too long", {"messages": [turn("x" * 32_001)]}, "messages.0.content"),
    ("bad role", {"messages": [turn("hi", role="robot")]}, "messages.0.role"),
    ("bad id", {"messages": [turn("hi", id="has space")]}, "messages.0.id"),
    ("naive time", {"messages": [turn("hi", created_at="2024-01-01T10:00:00")]}, "created_at"),
    ("future time", {"messages": [turn("hi", created_at=FUTURE)]}, "messages.0.created_at"),
    ("no messages", {"messages": []}, "messages"),
    ("too many", {"messages": [turn("hi")] * 1001}, "messages"),
    ("bad user", {"user_id": "no/slash", "messages": [turn("hi")]}, "user_id"),
    ("wait not bool", {"messages": [turn("hi")], "wait": "maybe"}, "wait"),
    ("wait as 0", {"messages": [turn("hi")], "wait": 0}, "wait"),
    ("wait as 'true'", {"messages": [turn("hi")], "wait": "true"}, "wait"),
    ("time as a number", {"messages": [turn("hi", created_at=0)]}, "messages.0.created_at"),
    ("content not a string", {"messages": [{"role": "user", "content": 5}]}, "content"),
    ("generated id", {"messages": [turn("hi", id="seq:1")]}, "messages.0.id"),
    ("lone surrogate", {"messages": [turn("bad \udc00 text")]}, "messages.0.content"),
    ("NUL", {"messages": [turn("a\x00b")]}, "messages.0.content"),
    ("huge int", {"messages": [turn("hi", metadata={"n": 2**70})]}, "messages.0.metadata"),
    ("surrogate key", {"messages": [turn("hi", metadata={"\udc00": 1})]}, "metadata"),
    ("big metadata", {"messages": [turn("hi", metadata={"k": "x" * 20_000})]}, "metadata"),
]


@pytest.mark.parametrize(("case", "patch", "field"), BAD_MESSAGES, ids=[c[0] for c in BAD_MESSAGES])
async def test_bad_messages_are_rejected_naming_the_field_and_store_nothing(
    running: Running, ids: Callable[[str], str], case: str, patch: dict[str, Any], field: str
) -> None:
    user, session = ids("user"), ids("session")
    body = {"user_id": user, **patch}
    # ASCII-escaped JSON, as a client may send it: it can carry lone surrogates.
    resp = await running.client.post(
        f"/v1/sessions/{session}/messages",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 422, case
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["code"] == "validation_error"
    assert problem["status"] == 422
    assert any(field in e["field"] for e in problem["errors"]), problem["errors"]
    assert field.split(".")[-1] in problem["detail"]
    # Nothing stored: not even the session the request would have created.
    check = await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})
    assert check.status_code == 404


async def test_out_of_range_numbers_are_422_not_500(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await running.client.put(f"/v1/sessions/{session}", json={"user_id": user})
    page = await running.client.get(
        f"/v1/sessions/{session}/messages", params={"user_id": user, "before_seq": 2**70}
    )
    assert page.status_code == 422
    assert page.json()["errors"][0]["field"] == "before_seq"
    recall = await running.client.post(
        "/v1/recall", json={"user_id": user, "query": "x", "metadata": {"n": 2**70}}
    )
    assert recall.status_code == 422


NOT_JSON: list[tuple[str, bytes, str]] = [
    ("open brace", b"{", "the body is not JSON"),
    ("bare word", b"{not json", "the body is not JSON"),
    ("latin-1 in a string", b'{"user_id": "u", "query": "caf\xe9"}', "the body is not UTF-8"),
    ("not UTF-8 at all", b"\xff\xfe\xfd", "the body is not UTF-8"),
]


@pytest.mark.parametrize("path", ["/v1/recall", "/v1/sessions/s/messages"])
@pytest.mark.parametrize(("case", "body", "detail"), NOT_JSON, ids=[c[0] for c in NOT_JSON])
async def test_a_body_that_is_not_json_is_a_400_problem(
    running: Running, path: str, case: str, body: bytes, detail: str
) -> None:
    resp = await running.client.post(
        path, content=body, headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400, case
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["code"] == "bad_request"
    assert problem["status"] == 400
    assert problem["detail"].startswith(detail), problem
    assert problem["request_id"] == resp.headers["x-request-id"]


@pytest.mark.parametrize(
    ("body", "field"), [(b"[]", "body"), (b'"text"', "body"), (b'{"query": 5}', "query")]
)
async def test_json_of_the_wrong_shape_stays_a_422_naming_the_field(
    running: Running, body: bytes, field: str
) -> None:
    resp = await running.client.post(
        "/v1/recall", content=body, headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422
    problem = resp.json()
    assert problem["code"] == "validation_error"
    assert any(e["field"] == field for e in problem["errors"]), problem


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": 201}, "top_k"),
        ({"query": " "}, "query"),
        ({"query": "x", "weights": {"semantic": -1, "recency": 0, "importance": 0}}, "semantic"),
        (
            {
                "query": "x",
                "time_range": {"from": "2024-02-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"},
            },
            "time_range",
        ),
        ({"query": "x", "memory_types": ["dreams"]}, "memory_types"),
        ({"query": "x", "as_of": "2024-01-01"}, "as_of"),
        ({"query": "x", "as_of": 0}, "as_of"),
        ({"query": "x", "as_of": "1700000000"}, "as_of"),
        ({"query": "x", "top_k": "10"}, "top_k"),
        ({"query": "x", "top_k": 10.5}, "top_k"),
        ({"query": "x", "top_k": True}, "top_k"),
        ({"query": "x", "reinforce": 0}, "reinforce"),
        ({"query": "x", "time_range": {"from": 1700000000}}, "time_range"),
        ({"query": "x", "surprise": True}, "surprise"),
        ({"query": "x", "metadata": {"a b": 1}}, "metadata"),
        ({"query": "x", "as_of": "0001-01-01T00:30:00+01:00"}, "as_of"),
        ({"query": "x", "time_range": {"from": "0001-01-01T00:30:00+01:00"}}, "time_range"),
    ],
)
async def test_bad_recall_is_a_422_naming_the_field(
    running: Running, body: dict[str, Any], field: str
) -> None:
    resp = await running.client.post("/v1/recall", json={"user_id": "u", **body})
    assert resp.status_code == 422
    assert any(field in e["field"] for e in resp.json()["errors"]), resp.json()


@pytest.mark.parametrize("value", ["0.5", "1700000000", "2024-01-01T00:00:00"])
async def test_a_time_in_a_query_is_iso_8601_with_an_offset(running: Running, value: str) -> None:
    """`to=0.5` was read as half a second after 1970 (found by fuzzing)."""
    resp = await running.client.get("/v1/users/u/summaries", params={"to": value})
    assert resp.status_code == 422
    assert resp.json()["errors"][0]["field"] == "to"


@pytest.mark.parametrize(("budget", "ok"), [(0, False), (200_001, False), (1, True)])
async def test_token_budget_limits(
    running: Running, ids: Callable[[str], str], budget: int, ok: bool
) -> None:
    user, session = ids("user"), ids("session")
    await running.client.put(f"/v1/sessions/{session}", json={"user_id": user})
    resp = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": budget}
    )
    # A budget of 1 is valid input; an empty session needs no tokens at all.
    assert resp.status_code == (200 if ok else 422), resp.text


async def test_every_error_carries_the_request_id(running: Running) -> None:
    resp = await running.client.get("/v1/nowhere", headers={"X-Request-ID": "trace-123"})
    assert resp.status_code == 404
    assert resp.headers["x-request-id"] == "trace-123"
    assert resp.json()["request_id"] == "trace-123"
    assert resp.json()["code"] == "not_found"
    made = await running.client.post("/v1/recall", json={})
    assert len(made.json()["request_id"]) == 32
    assert made.headers["x-request-id"] == made.json()["request_id"]


async def test_wrong_method_is_a_405_problem(running: Running) -> None:
    resp = await running.client.delete("/v1/recall")
    assert resp.status_code == 405
    assert resp.json()["code"] == "method_not_allowed"
    assert resp.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/v1/sessions/s1", "GET, PUT, DELETE"),
        ("PATCH", "/v1/sessions/s1/scratchpad", "GET, PUT, DELETE"),
        ("PUT", "/v1/memories/00000000-0000-0000-0000-000000000001", "GET, PATCH, DELETE"),
        ("PATCH", "/v1/memories/feedback", "POST"),
        ("GET", "/v1/memories/feedback", "POST"),
        ("DELETE", "/v1/sessions/s1/messages", "GET, POST"),
    ],
)
async def test_a_405_allows_every_method_of_the_path(
    running: Running, method: str, path: str, allow: str
) -> None:
    """Starlette named only the first matching route's method; a path served by several
    routes allows all of theirs."""
    resp = await running.client.request(method, path)
    assert resp.status_code == 405
    assert resp.headers["allow"] == allow
    assert resp.json()["code"] == "method_not_allowed"


async def test_health_and_readiness_report_each_dependency(running: Running) -> None:
    assert (await running.client.get("/healthz")).json() == {"status": "ok"}
    ready = await running.client.get("/readyz")
    assert ready.status_code == 200
    checks = ready.json()["checks"]
    assert set(checks) == {"database", "buffer", "vectors"}
    assert all(c["ok"] and c["latency_ms"] >= 0 for c in checks.values())


async def test_api_key_is_required_when_configured(
    pg_database: str, start_app: Any, tmp_path: Any
) -> None:
    from tests.conftest import embedded_settings

    settings = embedded_settings(tmp_path, api_key="s3cret")
    async with start_app(settings) as app:
        missing = await app.client.post("/v1/recall", json={"user_id": "u", "query": "x"})
        assert missing.status_code == 401
        assert missing.json()["code"] == "unauthorized"
        wrong = await app.client.post(
            "/v1/recall",
            json={"user_id": "u", "query": "x"},
            headers={"Authorization": "Bearer nope"},
        )
        assert wrong.status_code == 401
        right = await app.client.post(
            "/v1/recall",
            json={"user_id": "u", "query": "x"},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert right.status_code == 200
        assert right.json()["results"] == []


async def test_a_database_outage_is_a_503_problem_with_the_request_id(
    pg_databases: Any, start_app: Any
) -> None:
    import asyncpg

    from tests.conftest import PG_ADMIN_DSN, full_settings

    dsn = await pg_databases()
    async with start_app(full_settings(dsn, worker_in_process=False)) as app:
        ok = await app.client.put("/v1/sessions/s", json={"user_id": "u"})
        assert ok.status_code == 201
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:  # the database goes away under the running service
            await conn.execute(f'DROP DATABASE "{dsn.rsplit("/", 1)[1]}" WITH (FORCE)')
        finally:
            await conn.close()
        down = await app.client.get(
            "/v1/sessions/s", params={"user_id": "u"}, headers={"X-Request-ID": "outage-1"}
        )
        assert down.status_code == 503
        assert down.json()["code"] == "database_unavailable"
        assert down.json()["request_id"] == "outage-1"
        ready = await app.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"]["ok"] is False


async def test_times_and_dates_at_the_calendars_ends_are_a_422_not_a_500(
    running: Running, ids: Callable[[str], str]
) -> None:
    """A time that parses but has no UTC instant (year 1 at +14:00, year 9999 at −14:00), a
    date whose week runs off the calendar, and a cursor made of either: each a 422."""
    user = ids("user")
    base64_cursor = base64.urlsafe_b64encode(
        orjson.dumps(["0001-01-01T00:00:00+14:00", str(uuid.uuid4())])
    ).decode()
    requests = [
        (
            "POST",
            "/v1/summarize",
            {"user_id": user, "level": "daily", "period_start": "9999-12-31"},
        ),
        (
            "POST",
            "/v1/summarize",
            {"user_id": user, "level": "weekly", "period_start": "0001-01-01"},
        ),
        ("GET", f"/v1/users/{user}/summaries?from=0001-01-01T00:00:00%2B14:00", None),
        ("GET", f"/v1/users/{user}/summaries?to=9999-12-31T23:59:59-14:00", None),
        ("GET", f"/v1/users/{user}/summaries?cursor={base64_cursor.rstrip('=')}", None),
        (
            "GET",
            f"/v1/users/{user}/graph/neighbors?entity=x&as_of=0001-01-01T00:00:00%2B14:00",
            None,
        ),
        ("GET", f"/v1/users/{user}/graph/neighbors?entity=x&as_of=9999-12-31T23:59:59-14:00", None),
        (
            "POST",
            "/v1/recall",
            {"user_id": user, "query": "x", "as_of": "9999-12-31T23:59:59-14:00"},
        ),
    ]
    for method, url, body in requests:
        resp = await running.client.request(method, url, json=body)
        assert resp.status_code == 422, (url, body, resp.text)
        assert resp.headers["content-type"].startswith("application/problem+json")
