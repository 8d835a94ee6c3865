"""Cross-tenant and cross-user probes (docs/security.md, the probe table): another tenant's
key, or a key bound to another user, asks for a user's sessions, messages, memories,
summaries, scratchpad, context, recall and jobs by their real ids. Every probe is refused or
finds nothing, nothing of the user's content appears in any answer, and the user's data is
intact afterwards. Both modes."""

# ruff: noqa: F811 - the keyed apps' fixtures are imported from test_keys and used by name

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import Running, turn
from tests.integration.test_keys import (  # noqa: F401 - fixtures
    bearer,
    keyed,
    keyed_embedded_app,
    keyed_full_app,
    make_key,
)

SECRET = "Lisbon"  # a word only the victim's data holds


async def _victim(keyed: Running, ids: Callable[[str], str]) -> dict[str, Any]:
    """Tenant A's user ana: a session with messages, a memory, a scratchpad, a summary job."""
    tenant, ana, session = ids("tenant-a"), ids("ana"), ids("s")
    key = (await make_key(keyed, tenant=tenant))["key"]
    as_a = bearer(key)
    yesterday = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    sent = await keyed.client.post(
        f"/v1/sessions/{session}/messages",
        json={
            "user_id": ana,
            "wait": True,
            "messages": [
                turn(f"I moved to {SECRET} last May.", created_at=yesterday),
                turn("How do you like it?", role="assistant", created_at=yesterday),
            ],
        },
        headers=as_a,
    )
    assert sent.status_code == 200, sent.text
    memory = await keyed.client.post(
        "/v1/memories",
        json={"user_id": ana, "content": f"Lives in {SECRET}.", "memory_type": "semantic"},
        headers=as_a,
    )
    assert memory.status_code == 201, memory.text
    pad = await keyed.client.put(
        f"/v1/sessions/{session}/scratchpad",
        json={"user_id": ana, "data": {"city": SECRET}},
        headers=as_a,
    )
    assert pad.status_code == 200, pad.text
    job = await keyed.client.post(
        "/v1/summarize", json={"user_id": ana, "level": "daily"}, headers=as_a
    )
    assert job.status_code in (200, 202), job.text
    profile = await keyed.client.patch(
        f"/v1/users/{ana}/profile", json={"city": SECRET}, headers=as_a
    )
    assert profile.status_code == 200, profile.text
    graph = await keyed.client.post(
        f"/v1/users/{ana}/graph/triples",
        json={"triples": [{"subject": "user", "predicate": "lives_in", "object": SECRET}]},
        headers=as_a,
    )
    assert graph.status_code == 201, graph.text
    return {
        "tenant": tenant,
        "key": key,
        "user": ana,
        "session": session,
        "memory": memory.json()["id"],
        "job": job.json().get("job_id"),
    }


def _probes(v: dict[str, Any], user: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every route that reads or changes a user's data, aimed at the victim's ids, naming
    `user` as the user."""
    s, m = v["session"], v["memory"]
    probes: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"/v1/sessions/{s}", {"params": {"user_id": user}}),
        ("GET", f"/v1/sessions/{s}/messages", {"params": {"user_id": user}}),
        ("POST", "/v1/recall", {"json": {"user_id": user, "query": "Which city did I move to?"}}),
        (
            "POST",
            "/v1/recall",
            {"json": {"user_id": user, "query": "Where do I live?", "session_id": s}},
        ),
        ("POST", f"/v1/sessions/{s}/context", {"json": {"user_id": user}}),
        ("POST", "/v1/rewrite", {"json": {"user_id": user, "session_id": s, "query": "it?"}}),
        ("GET", "/v1/memories", {"params": {"user_id": user}}),
        ("GET", f"/v1/memories/{m}", {"params": {"user_id": user}}),
        ("GET", f"/v1/memories/{m}/history", {"params": {"user_id": user}}),
        ("PATCH", f"/v1/memories/{m}", {"json": {"user_id": user, "content": "overwritten"}}),
        ("DELETE", f"/v1/memories/{m}", {"params": {"user_id": user}}),
        ("GET", f"/v1/sessions/{s}/scratchpad", {"params": {"user_id": user}}),
        ("PUT", f"/v1/sessions/{s}/scratchpad", {"json": {"user_id": user, "data": {}}}),
        ("DELETE", f"/v1/sessions/{s}/scratchpad", {"params": {"user_id": user}}),
        ("GET", f"/v1/users/{user}/summaries", {}),
        ("DELETE", f"/v1/sessions/{s}", {"params": {"user_id": user}}),
        ("GET", f"/v1/users/{user}/export", {}),
        ("GET", f"/v1/users/{user}/profile", {}),
        ("GET", f"/v1/users/{user}/graph/entities", {"params": {"q": SECRET}}),
        ("GET", f"/v1/users/{user}/graph/neighbors", {"params": {"entity": "user"}}),
        ("DELETE", f"/v1/users/{user}", {}),
    ]
    if v["job"] is not None:
        probes += [
            ("GET", f"/v1/jobs/{v['job']}", {}),
            ("POST", f"/v1/jobs/{v['job']}/rerun", {}),
        ]
    return probes


async def _assert_intact(keyed: Running, v: dict[str, Any]) -> None:
    as_a = bearer(v["key"])
    params = {"user_id": v["user"]}
    messages = await keyed.client.get(
        f"/v1/sessions/{v['session']}/messages", params=params, headers=as_a
    )
    assert len(messages.json()["items"]) == 2
    memory = await keyed.client.get(f"/v1/memories/{v['memory']}", params=params, headers=as_a)
    assert memory.json()["content"] == f"Lives in {SECRET}."
    pad = await keyed.client.get(
        f"/v1/sessions/{v['session']}/scratchpad", params=params, headers=as_a
    )
    assert pad.json()["data"] == {"city": SECRET}
    found = await keyed.client.post(
        "/v1/recall",
        json={"user_id": v["user"], "query": f"{SECRET}", "reinforce": False},
        headers=as_a,
    )
    assert any(SECRET in r["content"] for r in found.json()["results"])
    exported = await keyed.client.get(f"/v1/users/{v['user']}/export", headers=as_a)
    assert exported.status_code == 200
    assert SECRET in exported.text
    profile = await keyed.client.get(f"/v1/users/{v['user']}/profile", headers=as_a)
    assert profile.json()["attributes"] == {"city": SECRET}


async def test_another_tenant_finds_nothing_of_a_user(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    victim = await _victim(keyed, ids)
    as_b = bearer((await make_key(keyed, tenant=ids("tenant-b")))["key"])
    for method, path, extra in _probes(victim, victim["user"]):
        resp = await keyed.client.request(method, path, headers=as_b, **extra)
        assert resp.status_code in (200, 404), (method, path, resp.status_code, resp.text)
        assert SECRET not in resp.text, (method, path)
        if resp.status_code == 200:
            body = resp.json()
            # Found nothing: empty lists and an empty working memory, never the victim's.
            assert body.get("results", []) == [], (method, path)
            assert body.get("items", []) == [], (method, path)
            assert body.get("data", {}) == {}, (method, path)
    # B may use the same ids for data of its own: a namespace of its own, empty.
    mine = await keyed.client.put(
        f"/v1/sessions/{victim['session']}", json={"user_id": victim["user"]}, headers=as_b
    )
    assert mine.status_code == 201
    assert mine.json()["last_seq"] == 0
    await _assert_intact(keyed, victim)


async def test_a_key_bound_to_another_user_is_refused_or_finds_nothing(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    victim = await _victim(keyed, ids)
    bob = ids("bob")
    as_bob = bearer((await make_key(keyed, tenant=victim["tenant"], user_id=bob))["key"])
    # Naming the victim: refused by the gate, whatever the route.
    for method, path, extra in _probes(victim, victim["user"]):
        resp = await keyed.client.request(method, path, headers=as_bob, **extra)
        assert resp.status_code == 403, (method, path, resp.status_code, resp.text)
        assert resp.json()["code"] == "user_not_allowed"
        assert SECRET not in resp.text
    # Naming himself with the victim's ids: the stores scope by user, so nothing is found.
    for method, path, extra in _probes(victim, bob):
        resp = await keyed.client.request(method, path, headers=as_bob, **extra)
        if path.startswith("/v1/jobs/"):
            assert resp.status_code == 403  # a bound key must name its user; jobs name none
            continue
        assert resp.status_code in (200, 404), (method, path, resp.status_code, resp.text)
        assert SECRET not in resp.text, (method, path)
        if resp.status_code == 200:
            body = resp.json()
            assert body.get("results", []) == [], (method, path)
            assert body.get("items", []) == [], (method, path)
    await _assert_intact(keyed, victim)


async def test_an_unbound_key_of_the_tenant_still_cannot_cross_users_by_id(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    """Without a bound key the tenant's callers are trusted to name users; still, a user's
    ids do not open another user's data."""
    victim = await _victim(keyed, ids)
    as_a = bearer(victim["key"])
    other = ids("other")
    for method, path, extra in _probes(victim, other):
        if path.startswith("/v1/jobs/"):
            continue  # jobs belong to the tenant, not to a user
        resp = await keyed.client.request(method, path, headers=as_a, **extra)
        assert resp.status_code in (200, 404), (method, path, resp.status_code, resp.text)
        assert SECRET not in resp.text, (method, path)
    await _assert_intact(keyed, victim)
