"""Profiles: JSON merge-patch (RFC 7396) with either content type, its limits, the facts
beside the attributes, and the context's profile section within the token budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from app.schemas.profile import MAX_PROFILE_BYTES
from tests.conftest import Running, post_messages, turn

MERGE = {"content-type": "application/merge-patch+json"}


async def patch(running: Running, user: str, body: Any, headers: dict[str, str] = MERGE) -> Any:
    return await running.client.patch(
        f"/v1/users/{user}/profile", content=orjson.dumps(body), headers=headers
    )


async def test_merge_patch(running: Running, ids: Callable[[str], str]) -> None:
    user = ids("user")
    empty = await running.client.get(f"/v1/users/{user}/profile")
    assert empty.status_code == 200
    assert empty.json() == {"user_id": user, "attributes": {}, "facts": []}

    first = await patch(running, user, {"name": "Ana", "diet": {"vegetarian": True, "nuts": 0}})
    assert first.status_code == 200, first.text
    second = await patch(
        running,
        user,
        {"diet": {"nuts": None, "vegan": False}, "city": "Porto"},
        headers={"content-type": "application/json"},
    )
    assert second.status_code == 200, second.text
    expected = {"name": "Ana", "diet": {"vegetarian": True, "vegan": False}, "city": "Porto"}
    assert second.json()["attributes"] == expected
    got = await running.client.get(f"/v1/users/{user}/profile")
    assert got.json()["attributes"] == expected
    # An array replaces whole; null removes a member.
    third = await patch(running, user, {"name": None, "langs": ["pt", "zh"]})
    assert third.json()["attributes"] == {
        "diet": {"vegetarian": True, "vegan": False},
        "city": "Porto",
        "langs": ["pt", "zh"],
    }


async def test_patch_limits(running: Running, ids: Callable[[str], str]) -> None:
    user = ids("user")
    not_object = await patch(running, user, ["a"])
    assert not_object.status_code == 422
    too_big = await patch(running, user, {"notes": "x" * (MAX_PROFILE_BYTES + 1)})
    assert too_big.status_code == 413
    assert too_big.json()["code"] == "profile_too_large"
    assert (await running.client.get(f"/v1/users/{user}/profile")).json()["attributes"] == {}
    # Summaries read `timezone` as an IANA name: anything else is refused, not kept as UTC.
    for bad in ("Mars/Olympus", 5, ""):
        resp = await patch(running, user, {"timezone": bad, "city": "Porto"})
        assert resp.status_code == 422, resp.text
        assert resp.json()["errors"][0]["field"] == "timezone", resp.text
    assert (await running.client.get(f"/v1/users/{user}/profile")).json()["attributes"] == {}
    ok = await patch(running, user, {"timezone": "Asia/Shanghai"})
    assert ok.status_code == 200, ok.text
    assert (await patch(running, user, {"timezone": None})).json()["attributes"] == {}


async def test_context_shows_the_profile_within_budget(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await patch(running, user, {"city": "Porto", "pets": ["Mochi"]})
    fact = await running.client.post(
        "/v1/memories",
        json={
            "user_id": user,
            "content": "The user is allergic to peanuts.",
            "memory_type": "semantic",
        },
    )
    assert fact.status_code == 201, fact.text
    profile = (await running.client.get(f"/v1/users/{user}/profile")).json()
    assert [f["content"] for f in profile["facts"]] == ["The user is allergic to peanuts."]

    await post_messages(running, session, user, [turn("What should I cook tonight?")])
    resp = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 3000}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["sections"]["profile"]["attributes"] == {"city": "Porto", "pets": ["Mochi"]}
    assert body["sections"]["profile"]["facts"][0]["content"] == "The user is allergic to peanuts."
    assert "## About the user" in body["text"]
    assert "city: Porto" in body["text"]
    assert body["tokens"]["profile"] > 0
    assert body["tokens"]["total"] <= 3000

    # A tight budget drops profile items rather than exceed it.
    tight = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 25}
    )
    assert tight.status_code == 200, tight.text
    assert tight.json()["tokens"]["total"] <= 25


async def test_the_profiles_facts_are_newest_first_across_types(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Semantic and procedural facts are read one branch per type (so an index gives each
    type's newest); the profile still lists them merged, newest first, episodes left out."""
    user = ids("user")
    await post_messages(running, ids("s"), user, [turn("Just chatting about the weather.")])
    written = []
    for n, memory_type in enumerate(["semantic", "procedural", "semantic", "procedural"]):
        resp = await running.client.post(
            "/v1/memories",
            json={"user_id": user, "content": f"Fact number {n}.", "memory_type": memory_type},
        )
        assert resp.status_code == 201, resp.text
        written.append(resp.json()["content"])
    profile = (await running.client.get(f"/v1/users/{user}/profile")).json()
    assert [f["content"] for f in profile["facts"]] == written[::-1]
