"""The knowledge graph on real PostgreSQL and SQLite: triples in (entities by case-folded
name, current relations not repeated), entity search, and neighbours at depth 1–3 through
the bounded recursive query — cycles, both directions, valid time, scoping by user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Running

# A chain user → Anna → Berlin → Germany → Europe, a cycle Anna ↔ Ben, and a side branch.
TRIPLES = [
    {"subject": "user", "predicate": "sister", "object": "Anna", "object_type": "person"},
    {"subject": "Anna", "predicate": "Lives in", "object": "Berlin", "object_type": "city"},
    {"subject": "Berlin", "predicate": "in", "object": "Germany"},
    {"subject": "Germany", "predicate": "in", "object": "Europe"},
    {"subject": "Anna", "predicate": "friend_of", "object": "Ben"},
    {"subject": "Ben", "predicate": "friend_of", "object": "Anna"},
    {"subject": "user", "predicate": "owns", "object": "Mochi", "object_type": "cat"},
]


async def add(running: Running, user: str, triples: list[dict[str, Any]]) -> dict[str, Any]:
    resp = await running.client.post(f"/v1/users/{user}/graph/triples", json={"triples": triples})
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def neighbors(running: Running, user: str, **params: Any) -> dict[str, Any]:
    resp = await running.client.get(f"/v1/users/{user}/graph/neighbors", params=params)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def depths(body: dict[str, Any]) -> dict[str, int]:
    return {n["name"]: n["depth"] for n in body["nodes"]}


async def test_neighbors_at_depth_one_to_three(running: Running, ids: Callable[[str], str]) -> None:
    user = ids("user")
    first = await add(running, user, TRIPLES)
    assert first["created"] == len(TRIPLES)
    assert {r["predicate"] for r in first["relations"]} >= {"lives_in", "friend_of"}

    one = await neighbors(running, user, entity="USER", depth=1)
    assert depths(one) == {"user": 0, "Anna": 1, "Mochi": 1}
    assert {(r["subject"], r["predicate"], r["object"]) for r in one["relations"]} == {
        ("user", "sister", "Anna"),
        ("user", "owns", "Mochi"),
    }
    two = await neighbors(running, user, entity="user", depth=2)
    assert depths(two) == {"user": 0, "Anna": 1, "Mochi": 1, "Berlin": 2, "Ben": 2}
    three = await neighbors(running, user, entity="user", depth=3)
    assert depths(three) == {
        "user": 0,
        "Anna": 1,
        "Mochi": 1,
        "Berlin": 2,
        "Ben": 2,
        "Germany": 3,
    }
    # Both directions: from the far end, the walk comes back along the chain.
    back = await neighbors(running, user, entity="europe", depth=3)
    assert depths(back) == {"Europe": 0, "Germany": 1, "Berlin": 2, "Anna": 3}
    # The cycle Anna ↔ Ben ends at the depth bound, each entity at its shortest distance.
    cycle = await neighbors(running, user, entity="Ben", depth=3)
    assert depths(cycle)["Ben"] == 0
    assert depths(cycle)["Anna"] == 1
    assert depths(cycle)["Germany"] == 3

    # Entities by part of their name, case-folded; the type recorded.
    found = await running.client.get(f"/v1/users/{user}/graph/entities", params={"q": "ANN"})
    assert [e["name"] for e in found.json()["items"]] == ["Anna"]
    assert found.json()["items"][0]["entity_type"] == "person"
    every = await running.client.get(f"/v1/users/{user}/graph/entities")
    assert len(every.json()["items"]) == 7


async def test_entities_page_by_cursor_in_their_order(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Entities are a list like the others: `next_cursor` as `cursor` walks them all, once
    each, in the order one long page gives (exact match, shorter names, by name); a junk
    cursor is a 422 `invalid_cursor`. There was no cursor, only the first `limit`."""
    user = ids("user")
    names = ["Ann", "Anna", "Joanna", "Hannah", "Annabel", "Bob", "Ana", "Anne", "Ann Lee"]
    await add(running, user, [{"subject": n, "predicate": "knows", "object": "Zed"} for n in names])
    url = f"/v1/users/{user}/graph/entities"
    for q in ("ann", None):
        base = {"q": q} if q else {}
        whole = (await running.client.get(url, params={**base, "limit": 200})).json()
        assert whole["next_cursor"] is None
        expected = [e["name"] for e in whole["items"]]
        assert len(expected) == (7 if q else len(names) + 1)  # all but Bob, Ana (and Zed)
        assert expected[0] == ("Ann" if q else "Ana")  # the exact match; the shortest name
        seen: list[str] = []
        params: dict[str, Any] = {**base, "limit": 2}
        for _ in range(10):
            page = (await running.client.get(url, params=params)).json()
            seen += [e["name"] for e in page["items"]]
            if page["next_cursor"] is None:
                break
            params["cursor"] = page["next_cursor"]
        assert seen == expected
    junk = await running.client.get(url, params={"cursor": "zz!"})
    assert junk.status_code == 422
    assert junk.json()["code"] == "invalid_cursor"


async def test_triples_are_not_repeated_and_end_in_valid_time(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, other = ids("user"), ids("other")
    await add(running, user, TRIPLES[:2])
    again = await add(running, user, [{"subject": "User", "predicate": "sister", "object": "anna"}])
    assert (again["created"], again["existing"]) == (0, 1)

    # A relation that ended: not a neighbour now, one as of a time it held.
    await add(
        running,
        user,
        [
            {
                "subject": "user",
                "predicate": "lives_in",
                "object": "Lisbon",
                "valid_from": "2024-01-01T00:00:00Z",
                "valid_to": "2025-06-01T00:00:00Z",
            }
        ],
    )
    assert "Lisbon" not in depths(await neighbors(running, user, entity="user", depth=1))
    then = await neighbors(running, user, entity="user", depth=1, as_of="2025-01-01T00:00:00Z")
    assert depths(then).get("Lisbon") == 1
    before = await neighbors(running, user, entity="user", depth=1, as_of="2023-01-01T00:00:00Z")
    assert "Lisbon" not in depths(before)

    # Another user sees none of it; an unknown entity is a 404; depth is 1–3.
    resp = await running.client.get(
        f"/v1/users/{other}/graph/neighbors", params={"entity": "user", "depth": 1}
    )
    assert resp.status_code == 404
    assert resp.json()["code"] == "entity_not_found"
    resp = await running.client.get(
        f"/v1/users/{user}/graph/neighbors", params={"entity": "user", "depth": 4}
    )
    assert resp.status_code == 422
    # A relation cannot end before it began; a rejected batch writes nothing.
    backwards = {
        "subject": "user",
        "predicate": "lived_in",
        "object": "Madrid",
        "valid_from": "2022-01-01T00:00:00Z",
        "valid_to": "2021-01-01T00:00:00Z",
    }
    resp = await running.client.post(
        f"/v1/users/{user}/graph/triples",
        json={"triples": [{"subject": "user", "predicate": "knows", "object": "Zed"}, backwards]},
    )
    assert resp.status_code == 422, resp.text
    assert "valid_to" in resp.text
    assert "Zed" not in depths(await neighbors(running, user, entity="user", depth=1))
    # A number is not a time (pydantic alone would read `0` as 1970 and answer 200).
    for as_of in ("0", "1700000000", "2025-01-01"):
        resp = await running.client.get(
            f"/v1/users/{user}/graph/neighbors", params={"entity": "user", "as_of": as_of}
        )
        assert resp.status_code == 422, (as_of, resp.text)
        assert resp.json()["errors"][0]["field"].endswith("as_of"), resp.text
    resp = await running.client.get(f"/v1/users/{other}/graph/entities", params={"q": "anna"})
    assert resp.json()["items"] == []


async def test_like_wildcards_in_a_search_are_literal(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    await add(running, user, [{"subject": "100% Cotton", "predicate": "is", "object": "a_b"}])
    pct = await running.client.get(f"/v1/users/{user}/graph/entities", params={"q": "%"})
    assert [e["name"] for e in pct.json()["items"]] == ["100% Cotton"]
    under = await running.client.get(f"/v1/users/{user}/graph/entities", params={"q": "_"})
    assert [e["name"] for e in under.json()["items"]] == ["a_b"]
