"""Sessions are the user's (docs/security.md, "Sessions are the user's"): a session is keyed
by (tenant, user, session id), so two users of one tenant may use one session id, each
with a session of their own, and no answer tells a caller whether another user holds an id.
Both modes."""

# ruff: noqa: F811 - the keyed apps' fixtures are imported from test_keys and used by name

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Running, post_messages, recall, turn
from tests.integration.test_keys import (  # noqa: F401 - fixtures
    bearer,
    keyed,
    keyed_embedded_app,
    keyed_full_app,
    make_key,
)


async def test_two_users_each_have_their_own_session_of_one_id(
    running: Running, ids: Callable[[str], str]
) -> None:
    app = running.client
    ana, bob, session = ids("ana"), ids("bob"), "s1"
    for who, city in ((ana, "Lisbon"), (bob, "Oslo")):
        created = await app.put(f"/v1/sessions/{session}", json={"user_id": who})
        assert created.status_code == 201, created.text
        await post_messages(
            running, session, who, [turn(f"I live in {city}.", id="m1"), turn(f"{who} here")]
        )
        pad = await app.put(
            f"/v1/sessions/{session}/scratchpad", json={"user_id": who, "data": {"city": city}}
        )
        assert pad.status_code == 200, pad.text

    for who, city in ((ana, "Lisbon"), (bob, "Oslo")):
        listed = await app.get(f"/v1/sessions/{session}/messages", params={"user_id": who})
        assert [m["content"] for m in listed.json()["items"]] == [
            f"I live in {city}.",
            f"{who} here",
        ]
        got = await app.get(f"/v1/sessions/{session}", params={"user_id": who})
        assert (got.json()["user_id"], got.json()["last_seq"]) == (who, 2)
        context = await app.post(f"/v1/sessions/{session}/context", json={"user_id": who})
        body = context.json()
        assert [m["content"] for m in body["sections"]["recent_messages"]] == [
            f"I live in {city}.",
            f"{who} here",
        ]
        assert body["sections"]["working_memory"] == {"city": city}
        found = await recall(running, who, "Where do I live?", min_relevance=0)
        contents = " ".join(r["content"] for r in found)
        assert city in contents
        assert ({"Lisbon", "Oslo"} - {city}).pop() not in contents

    # One user deleting their session leaves the other's.
    gone = await app.delete(f"/v1/sessions/{session}", params={"user_id": ana})
    assert gone.status_code == 200, gone.text
    assert (await app.get(f"/v1/sessions/{session}", params={"user_id": ana})).status_code == 404
    kept = await app.get(f"/v1/sessions/{session}/messages", params={"user_id": bob})
    assert len(kept.json()["items"]) == 2


def _probes(session: str, user: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every session route, reads first; the last two create the caller's own session."""
    return [
        ("GET", f"/v1/sessions/{session}", {"params": {"user_id": user}}),
        ("GET", f"/v1/sessions/{session}/messages", {"params": {"user_id": user}}),
        ("GET", f"/v1/sessions/{session}/scratchpad", {"params": {"user_id": user}}),
        ("PUT", f"/v1/sessions/{session}/scratchpad", {"json": {"user_id": user, "data": {}}}),
        ("DELETE", f"/v1/sessions/{session}/scratchpad", {"params": {"user_id": user}}),
        ("POST", f"/v1/sessions/{session}/context", {"json": {"user_id": user}}),
        ("POST", "/v1/rewrite", {"json": {"user_id": user, "session_id": session, "query": "it?"}}),
        ("POST", "/v1/recall", {"json": {"user_id": user, "query": "x", "session_id": session}}),
        (
            "POST",
            "/v1/memories",
            {
                "json": {
                    "user_id": user,
                    "content": "a note",
                    "memory_type": "semantic",
                    "session_id": session,
                }
            },
        ),
        ("DELETE", f"/v1/sessions/{session}", {"params": {"user_id": user}}),
        ("PUT", f"/v1/sessions/{session}", {"json": {"user_id": user}}),
        (
            "POST",
            f"/v1/sessions/{session}/messages",
            {"json": {"user_id": user, "messages": [turn("hello")]}},
        ),
    ]


async def test_a_bound_key_gets_the_same_answer_for_another_users_session_id_as_for_an_unused_one(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    tenant, ana, bob = ids("tenant"), ids("ana"), ids("bob")
    as_ana = bearer((await make_key(keyed, tenant=tenant, user_id=ana))["key"])
    as_bob = bearer((await make_key(keyed, tenant=tenant, user_id=bob))["key"])
    taken, unused = ids("ana-session"), ids("never-used")
    resp = await keyed.client.post(
        f"/v1/sessions/{taken}/messages",
        json={"user_id": ana, "messages": [turn("I live in Lisbon.")]},
        headers=as_ana,
    )
    assert resp.status_code == 202, resp.text

    def answer(resp: Any) -> tuple[int, str | None]:
        body = resp.json() if resp.content else None
        return resp.status_code, body.get("code") if isinstance(body, dict) else None

    for (method, path, extra), (_, unused_path, unused_extra) in zip(
        _probes(taken, bob), _probes(unused, bob), strict=True
    ):
        probe = await keyed.client.request(method, path, headers=as_bob, **extra)
        control = await keyed.client.request(method, unused_path, headers=as_bob, **unused_extra)
        assert answer(probe) == answer(control), (method, path, probe.text, control.text)
        assert "Lisbon" not in probe.text
    # Ana's session is as she left it.
    mine = await keyed.client.get(
        f"/v1/sessions/{taken}/messages", params={"user_id": ana}, headers=as_ana
    )
    assert [m["content"] for m in mine.json()["items"]] == ["I live in Lisbon."]
