"""Input every store must refuse the same way, in both modes: a 422 problem naming the field,
and nothing stored (docs/reliability.md, "Limits").

- NUL in stored or queried text: PostgreSQL's `text` cannot hold it (asyncpg raised, a 500),
  SQLite stored it.
- Identifiers made of dots alone: `.` and `..` are path segments clients normalise away, so
  such a user or session could be created but never reached.
- A JSON body sent as another media type is a 415 `unsupported_media_type` (it was a 422
  blaming the fields).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from fastapi.routing import iter_route_contexts

from tests.conftest import Running, turn


def assert_refused(resp: httpx.Response, field: str) -> None:
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["code"] == "validation_error"
    assert [e["field"] for e in problem["errors"]] == [field], problem["errors"]
    assert field in problem["detail"]


TRIPLE = {"subject": "Anna", "predicate": "lives_in", "object": "Berlin"}
NUL_IN_TRIPLES: list[tuple[str, str]] = [
    ("subject", "An\x00na"),
    ("predicate", "lives\x00in"),
    ("object", "\x00"),
    ("subject_type", "per\x00son"),
    ("object_type", "city\x00"),
]


@pytest.mark.parametrize(("name", "value"), NUL_IN_TRIPLES, ids=[c[0] for c in NUL_IN_TRIPLES])
async def test_nul_in_a_triple_is_a_422_naming_the_field_and_stores_nothing(
    running: Running, ids: Callable[[str], str], name: str, value: str
) -> None:
    user = ids("user")
    triples: list[dict[str, Any]] = [TRIPLE, {**TRIPLE, name: value}]
    resp = await running.client.post(f"/v1/users/{user}/graph/triples", json={"triples": triples})
    assert_refused(resp, f"triples.1.{name}")
    # Not the valid triple beside it, nor the user's row a graph write creates.
    entities = await running.client.get(f"/v1/users/{user}/graph/entities")
    assert entities.status_code == 200, entities.text
    assert entities.json()["items"] == []
    assert (await running.client.get(f"/v1/users/{user}/export")).status_code == 404


@pytest.mark.parametrize(
    ("route", "param"), [("entities", "q"), ("neighbors", "entity")], ids=["q", "entity"]
)
async def test_nul_in_a_graph_query_is_a_422_naming_the_parameter(
    running: Running, ids: Callable[[str], str], route: str, param: str
) -> None:
    user = ids("user")
    made = await running.client.post(f"/v1/users/{user}/graph/triples", json={"triples": [TRIPLE]})
    assert made.status_code == 201, made.text
    resp = await running.client.get(f"/v1/users/{user}/graph/{route}", params={param: "Anna\x00"})
    assert_refused(resp, param)


async def test_nul_in_a_key_name_is_a_422_naming_the_field_and_stores_nothing(
    running: Running,
) -> None:
    async def listed() -> list[str]:
        resp = await running.client.get("/v1/admin/keys", params={"limit": 200})
        assert resp.status_code == 200, resp.text
        return [key["id"] for key in resp.json()["items"]]

    before = await listed()
    resp = await running.client.post(
        "/v1/admin/keys", json={"name": "back\x00office", "scopes": ["read"]}
    )
    assert_refused(resp, "name")
    assert await listed() == before


DOTS = [".", "..", "..."]


async def _rows_named_by_dots(running: Running) -> int:
    """Users, sessions and messages whose ids are dots alone, in the open server's tenant."""
    names = "('.', '..', '...')"
    queries = [
        f"SELECT count(*) FROM users WHERE tenant_id = 'default' AND id IN {names}",
        f"SELECT count(*) FROM sessions WHERE tenant_id = 'default' "
        f"AND (id IN {names} OR user_id IN {names})",
        f"SELECT count(*) FROM messages WHERE tenant_id = 'default' "
        f"AND (session_id IN {names} OR client_id IN {names})",
        f"SELECT count(*) FROM memories WHERE tenant_id = 'default' AND user_id IN {names}",
    ]
    async with running.resources.db.engine.connect() as conn:
        return sum([int(await conn.scalar(sa.text(query)) or 0) for query in queries])


@pytest.mark.parametrize("dots", DOTS)
async def test_an_id_of_dots_alone_is_a_422_in_a_body_a_query_and_a_path(
    running: Running, ids: Callable[[str], str], dots: str
) -> None:
    user, session = ids("user"), ids("session")
    memory = {"user_id": dots, "content": "I live in Lisbon", "memory_type": "semantic"}
    assert_refused(await running.client.post("/v1/memories", json=memory), "user_id")
    put = await running.client.put(f"/v1/sessions/{session}", json={"user_id": dots})
    assert_refused(put, "user_id")
    message = {"user_id": user, "messages": [turn("hi", id=dots)], "wait": True}
    posted = await running.client.post(f"/v1/sessions/{session}/messages", json=message)
    assert_refused(posted, "messages.0.id")

    listed = await running.client.get("/v1/memories", params={"user_id": dots})
    assert_refused(listed, "user_id")

    # Percent-encoded, so that no client normalises the segment away before the server.
    encoded = dots.replace(".", "%2E")
    message = {"user_id": user, "messages": [turn("hi")], "wait": True}
    posted = await running.client.post(f"/v1/sessions/{encoded}/messages", json=message)
    assert_refused(posted, "session_id")
    exported = await running.client.get(f"/v1/users/{encoded}/export")
    assert_refused(exported, "user_id")

    assert await _rows_named_by_dots(running) == 0
    assert (await running.client.get(f"/v1/users/{user}/export")).status_code == 404


NOT_JSON = [
    "text/plain",
    "application/xml",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    None,
]


def assert_unsupported(resp: httpx.Response) -> None:
    assert resp.status_code == 415, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["code"] == "unsupported_media_type"
    assert problem["status"] == 415
    assert problem["request_id"] == resp.headers["x-request-id"]


def _send(running: Running, method: str, url: str, body: Any, content_type: str | None) -> Any:
    headers = {} if content_type is None else {"content-type": content_type}
    return running.client.request(method, url, content=orjson.dumps(body), headers=headers)


@pytest.mark.parametrize("content_type", NOT_JSON, ids=lambda c: c or "none")
async def test_a_json_body_sent_as_another_media_type_is_a_415_and_stores_nothing(
    running: Running, ids: Callable[[str], str], content_type: str | None
) -> None:
    user, session = ids("user"), ids("session")
    writes = [
        ("PUT", f"/v1/sessions/{session}", {"user_id": user}),
        ("POST", f"/v1/sessions/{session}/messages", {"user_id": user, "messages": [turn("hi")]}),
        ("POST", "/v1/memories", {"user_id": user, "content": "x", "memory_type": "semantic"}),
        ("PATCH", f"/v1/users/{user}/profile", {"city": "Porto"}),
        ("POST", f"/v1/users/{user}/graph/triples", {"triples": [TRIPLE]}),
    ]
    for method, url, body in writes:
        assert_unsupported(await _send(running, method, url, body, content_type))
    assert (await running.client.get(f"/v1/users/{user}/export")).status_code == 404
    assert (
        await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})
    ).status_code == 404


async def test_every_route_with_a_body_answers_415_to_a_body_that_is_not_json(
    running: Running,
) -> None:
    """Walks the routes: one a later change adds gets the check from the gate."""
    routes = [
        context
        for context in iter_route_contexts(running.app.routes)
        if (context.path or "").startswith("/v1")
        and getattr(context.original_route, "body_field", None) is not None
    ]
    assert len(routes) > 10
    for route in routes:
        path = route.path or ""
        url = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
        for method in route.methods or ():
            resp = await _send(running, method, url, {}, "text/plain")
            assert resp.status_code == 415, (method, path, resp.text)


JSON_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON;charset=UTF-8",
    "application/merge-patch+json",
]


@pytest.mark.parametrize("content_type", JSON_TYPES)
async def test_json_media_types_with_parameters_are_read(
    running: Running, ids: Callable[[str], str], content_type: str
) -> None:
    user = ids("user")
    resp = await _send(
        running, "PATCH", f"/v1/users/{user}/profile", {"city": "Porto"}, content_type
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["attributes"] == {"city": "Porto"}


async def test_a_number_past_64_bits_in_a_profile_is_a_422_and_the_profile_stays_usable(
    running: Running, ids: Callable[[str], str]
) -> None:
    """PostgreSQL's jsonb keeps 1e20 as the integer 100000000000000000000: stored, it came
    back past what the service serialises, and the profile's next PATCH was a 500 (found by
    the fuzz test). Such a number is refused like an integer past 64 bits; one within them
    is kept, in either store, and the profile can be changed again."""
    url = f"/v1/users/{ids('user')}/profile"
    headers = {"content-type": "application/merge-patch+json"}
    for big in (1e20, -1e19):
        resp = await running.client.patch(url, content=orjson.dumps({"n": big}), headers=headers)
        assert resp.status_code == 422, resp.text
        assert "64-bit" in resp.text
    assert (await running.client.get(url)).json()["attributes"] == {}
    ok = await running.client.patch(url, content=b'{"n": 1e18, "x": 2.5}', headers=headers)
    assert ok.status_code == 200, ok.text
    again = await running.client.patch(url, content=b'{"city": "Porto"}', headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["attributes"]["city"] == "Porto"
    assert again.json()["attributes"]["n"] == 1e18
