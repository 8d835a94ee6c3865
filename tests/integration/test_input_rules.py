"""Input every store must refuse the same way, in both modes: a 422 problem naming the field,
and nothing stored (docs/reliability.md, "Limits").

- NUL in stored or queried text: PostgreSQL's `text` cannot hold it (asyncpg raised, a 500),
  SQLite stored it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Running


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
