"""Long-term memories: CRUD, pagination, history, scoping, and the index following the rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.services.cursors import encode_cursor
from tests.conftest import Running, recall


async def create(running: Running, user: str, content: str, **extra: Any) -> dict[str, Any]:
    resp = await running.client.post(
        "/v1/memories",
        json={"user_id": user, "content": content, "memory_type": "semantic", **extra},
    )
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def test_create_read_update_delete_with_history(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    memory = await create(running, user, "Is allergic to peanuts.", importance=0.9)
    mid = memory["id"]
    assert memory["importance"] == 0.9
    assert memory["sources"] == []

    got = await running.client.get(f"/v1/memories/{mid}", params={"user_id": user})
    assert got.json()["content"] == "Is allergic to peanuts."
    assert (await recall(running, user, "peanut allergy"))[0]["id"] == mid

    patched = await running.client.patch(
        f"/v1/memories/{mid}",
        json={
            "user_id": user,
            "content": "Is allergic to peanuts and shellfish.",
            "reason": "told",
        },
    )
    assert patched.status_code == 200
    assert patched.json()["content"].endswith("shellfish.")
    assert (await recall(running, user, "shellfish"))[0]["id"] == mid

    deleted = await running.client.delete(f"/v1/memories/{mid}", params={"user_id": user})
    assert deleted.status_code == 204
    gone = await running.client.get(f"/v1/memories/{mid}", params={"user_id": user})
    assert gone.status_code == 404
    assert gone.json()["code"] == "memory_not_found"
    assert await recall(running, user, "shellfish") == []

    history = await running.client.get(f"/v1/memories/{mid}/history", params={"user_id": user})
    events = history.json()["items"]
    assert [e["event"] for e in events] == ["created", "updated", "deleted"]
    assert events[1]["old"] == {"content": "Is allergic to peanuts."}
    assert events[1]["new"] == {"content": "Is allergic to peanuts and shellfish."}
    assert events[1]["reason"] == "told"


async def test_memories_are_scoped_to_their_user(
    running: Running, ids: Callable[[str], str]
) -> None:
    owner, other = ids("owner"), ids("other")
    memory = await create(running, owner, "Keeps bees on the roof.")
    for call in (
        running.client.get(f"/v1/memories/{memory['id']}", params={"user_id": other}),
        running.client.delete(f"/v1/memories/{memory['id']}", params={"user_id": other}),
        running.client.patch(
            f"/v1/memories/{memory['id']}", json={"user_id": other, "content": "hijacked"}
        ),
        running.client.get(f"/v1/memories/{memory['id']}/history", params={"user_id": other}),
    ):
        assert (await call).status_code == 404
    assert await recall(running, other, "bees on the roof") == []
    assert len(await recall(running, owner, "bees on the roof")) == 1


async def test_list_is_cursor_paginated_and_filtered_by_type(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    made = [(await create(running, user, f"fact number {i}"))["id"] for i in range(5)]
    await create(running, user, "how to brew coffee", memory_type="procedural")

    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"user_id": user, "limit": 2, "memory_type": "semantic"}
        if cursor:
            params["cursor"] = cursor
        page = (await running.client.get("/v1/memories", params=params)).json()
        seen += [m["id"] for m in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made)
    assert len(seen) == len(set(seen))

    forged = [
        "zz!",
        encode_cursor("2024-01-01T00:00:00", "00000000-0000-0000-0000-000000000000"),
        encode_cursor("2024-01-01T00:00:00+00:00", 5),
        encode_cursor(1, 2, 3),
        encode_cursor("0001-01-01T00:00:00+05:00", "00000000-0000-0000-0000-000000000000"),
    ]
    for cursor in forged:
        bad = await running.client.get("/v1/memories", params={"user_id": user, "cursor": cursor})
        assert bad.status_code == 422, cursor
        assert bad.json()["errors"][0]["field"] == "cursor"
    history = await running.client.get(
        f"/v1/memories/{made[0]}/history",
        params={"user_id": user, "cursor": encode_cursor(2**63)},
    )
    assert history.status_code == 422


async def test_patch_rejects_null_and_unknown_session(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    memory = await create(running, user, "Likes jazz.")
    for field in ("content", "memory_type", "importance", "pinned", "metadata"):
        # `importance: null` was a 500 (its bounds applied to the null), found by fuzzing.
        null = await running.client.patch(
            f"/v1/memories/{memory['id']}", json={"user_id": user, field: None}
        )
        assert null.status_code == 422, (field, null.text)
        assert null.json()["errors"][0]["field"] == field
    orphan = await running.client.post(
        "/v1/memories",
        json={
            "user_id": user,
            "content": "x",
            "memory_type": "semantic",
            "session_id": "no-such-session",
        },
    )
    assert orphan.status_code == 404
    assert orphan.json()["code"] == "session_not_found"


async def test_deleting_a_session_keeps_what_the_caller_filed_there_unfiled(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    url = f"/v1/sessions/{session}"
    assert (await running.client.put(url, json={"user_id": user})).status_code == 201
    kept = await create(running, user, "Plays the cello.", session_id=session)
    dropped = await create(running, user, "Owned a red bicycle.", session_id=session)
    await running.client.delete(f"/v1/memories/{dropped['id']}", params={"user_id": user})

    deleted = await running.client.delete(url, params={"user_id": user})
    assert deleted.json() == {"session_id": session, "messages": 0, "memories": 1, "summaries": 0}
    still = await running.client.get(f"/v1/memories/{kept['id']}", params={"user_id": user})
    assert still.json()["session_id"] is None
    assert still.json()["updated_at"] > kept["updated_at"]
    assert [r["id"] for r in await recall(running, user, "cello")] == [kept["id"]]
    # The soft-deleted one quoted the session: it is erased, history and all.
    history = await running.client.get(
        f"/v1/memories/{dropped['id']}/history", params={"user_id": user}
    )
    assert history.status_code == 404
