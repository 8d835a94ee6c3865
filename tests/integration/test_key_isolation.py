"""Keys built from ids never let two tenants or users meet (docs/security.md, "Keys built
from identifiers"): tenant `acme` with session `x:y` and tenant `acme:x` with session `y`
once shared one Redis window and scratchpad."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from app.core import keys
from app.settings import Settings
from tests.conftest import Running, embedded_settings, full_settings, turn

ADMIN = "admin-secret-for-isolation"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
async def keyed_full(
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    start_app: Callable[[Settings], Any],
) -> AsyncIterator[Running]:
    settings = full_settings(await pg_databases(), auth_mode="keys", admin_key=ADMIN)
    async with start_app(settings) as running:
        yield running


async def make_key(running: Running, tenant: str) -> dict[str, str]:
    resp = await running.client.post(
        "/v1/admin/keys", json={"tenant": tenant, "scopes": ["write"]}, headers=bearer(ADMIN)
    )
    assert resp.status_code == 201, resp.text
    return bearer(resp.json()["key"])


@pytest.fixture(scope="module")
async def keyed_embedded(
    tmp_path_factory: pytest.TempPathFactory, start_app: Callable[[Settings], Any]
) -> AsyncIterator[Running]:
    settings = embedded_settings(tmp_path_factory.mktemp("isolation"), admin_key=ADMIN)
    async with start_app(settings) as running:
        yield running


@pytest.fixture(params=["full", "embedded"])
def keyed(request: pytest.FixtureRequest) -> Running:
    running: Running = request.getfixturevalue(f"keyed_{request.param}")
    return running


async def test_tenant_acme_and_tenant_acme_x_share_no_buffer(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    app = keyed.client
    acme = ids("acme")
    inner, outer = await make_key(keyed, f"{acme}:x"), await make_key(keyed, acme)
    user = "u"  # the same user id in both tenants

    # As `acme:x`: session `y`, a message and a scratchpad.
    resp = await app.post(
        "/v1/sessions/y/messages",
        json={"user_id": user, "messages": [turn("inner secret: the vault code is 4711")]},
        headers=inner,
    )
    assert resp.status_code == 202, resp.text
    resp = await app.put(
        "/v1/sessions/y/scratchpad",
        json={"user_id": user, "data": {"who": "acme:x"}},
        headers=inner,
    )
    assert resp.status_code == 200, resp.text

    # As `acme`: session `x:y` is new and empty.
    resp = await app.put("/v1/sessions/x:y", json={"user_id": user}, headers=outer)
    assert resp.status_code in (200, 201), resp.text
    pad = await app.get("/v1/sessions/x:y/scratchpad", params={"user_id": user}, headers=outer)
    assert pad.status_code == 200, pad.text
    assert pad.json()["data"] == {}
    resp = await app.post(
        "/v1/sessions/x:y/messages",
        json={"user_id": user, "messages": [turn("outer note: lunch at noon")]},
        headers=outer,
    )
    assert resp.status_code == 202, resp.text
    resp = await app.put(
        "/v1/sessions/x:y/scratchpad",
        json={"user_id": user, "data": {"who": "acme"}},
        headers=outer,
    )
    assert resp.status_code == 200, resp.text

    async def recent(session: str, key: dict[str, str]) -> list[str]:
        resp = await app.post(
            f"/v1/sessions/{session}/context", json={"user_id": user}, headers=key
        )
        assert resp.status_code == 200, resp.text
        return [m["content"] for m in resp.json()["sections"]["recent_messages"]]

    assert await recent("x:y", outer) == ["outer note: lunch at noon"]
    assert await recent("y", inner) == ["inner secret: the vault code is 4711"]
    pad = await app.get("/v1/sessions/y/scratchpad", params={"user_id": user}, headers=inner)
    assert pad.json()["data"] == {"who": "acme:x"}

    # Erasing `acme`'s user leaves `acme:x`'s buffer alone.
    erased = await app.delete(f"/v1/users/{user}", headers=outer)
    assert erased.status_code == 200, erased.text
    pad = await app.get("/v1/sessions/y/scratchpad", params={"user_id": user}, headers=inner)
    assert pad.json()["data"] == {"who": "acme:x"}
    assert await recent("y", inner) == ["inner secret: the vault code is 4711"]


@pytest.mark.parametrize("mode_app", ["full"], indirect=True)
async def test_no_redis_key_names_an_erased_user(
    mode_app: Running, ids: Callable[[str], str]
) -> None:
    """Erasure removes every Redis key naming the user: each session's window and
    scratchpad and the change mark of context's cached reads (docs/privacy.md)."""
    running = mode_app
    app, redis = running.client, running.resources.buffer.redis
    user, bystander = ids("erased:user"), ids("bystander")
    for who in (user, bystander):
        for session in (f"{who}-s1", f"{who}:s2"):
            resp = await app.post(
                f"/v1/sessions/{session}/messages",
                json={"user_id": who, "messages": [turn(f"{who} lives in Porto.")]},
            )
            assert resp.status_code == 202, resp.text
            resp = await app.put(
                f"/v1/sessions/{session}/scratchpad", json={"user_id": who, "data": {"a": 1}}
            )
            assert resp.status_code == 200, resp.text
        patched = await app.patch(f"/v1/users/{who}/profile", json={"city": "Porto"})
        assert patched.status_code == 200, patched.text
        resp = await app.post(f"/v1/sessions/{who}-s1/context", json={"user_id": who})
        assert resp.status_code == 200, resp.text

    async def naming(who: str) -> list[bytes]:
        return [
            k
            async for k in redis.scan_iter(count=1000)
            if who.encode() in k or keys.part(who).encode() in k
        ]

    before = await naming(user)
    assert len(before) >= 5, before  # two windows, two scratchpads, the change mark
    erased = await app.delete(f"/v1/users/{user}")
    assert erased.status_code == 200, erased.text
    assert await naming(user) == []
    assert len(await naming(bystander)) == len(before)
