"""API keys and the gate, on apps that require keys (both modes): the key's lifecycle, scopes,
user binding, rate limits, the CLI, and how a server without keys starts (docs/security.md)."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app import keys as keys_cli
from app.settings import Settings
from app.stores.buffer import Breaker
from app.stores.ratelimit import LocalRateLimiter, RedisRateLimiter
from tests.conftest import Running, embedded_settings, full_settings, turn

ADMIN = "admin-secret-for-tests"
LEGACY = "legacy-secret-for-tests"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
async def keyed_full_app(
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    start_app: Callable[[Settings], Any],
) -> AsyncIterator[Running]:
    settings = full_settings(
        await pg_databases(), auth_mode="keys", admin_key=ADMIN, api_key=LEGACY
    )
    async with start_app(settings) as running:
        yield running


@pytest.fixture(scope="module")
async def keyed_embedded_app(
    tmp_path_factory: pytest.TempPathFactory, start_app: Callable[[Settings], Any]
) -> AsyncIterator[Running]:
    settings = embedded_settings(tmp_path_factory.mktemp("keyed"), admin_key=ADMIN, api_key=LEGACY)
    async with start_app(settings) as running:
        yield running


@pytest.fixture(params=["full", "embedded"])
def keyed(request: pytest.FixtureRequest) -> Running:
    fixture: Running = request.getfixturevalue(f"keyed_{request.param}_app")
    return fixture


def served(running: Running) -> Any:
    """The app with its lifespan state, as the running client's transport serves it."""
    return running.client._transport.app  # type: ignore[attr-defined]


async def make_key(running: Running, **body: Any) -> dict[str, Any]:
    resp = await running.client.post("/v1/admin/keys", json=body, headers=bearer(ADMIN))
    assert resp.status_code == 201, resp.text
    created: dict[str, Any] = resp.json()
    return created


async def test_a_key_is_shown_once_works_and_stops_at_revocation(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    tenant, user = ids("tenant"), ids("user")
    created = await make_key(keyed, tenant=tenant, scopes=["write"], name="agent")
    key = created["key"]
    assert key.startswith(f"sk_strata_{uuid.UUID(created['id']).hex}_")
    assert created["tenant"] == tenant
    assert created["scopes"] == ["read", "write"]  # write implies read
    assert created["revoked_at"] is None

    ok = await keyed.client.post(
        "/v1/recall", json={"user_id": user, "query": "x"}, headers=bearer(key)
    )
    assert ok.status_code == 200, ok.text

    listed = await keyed.client.get(
        "/v1/admin/keys", params={"tenant": tenant}, headers=bearer(ADMIN)
    )
    assert listed.status_code == 200
    assert [k["id"] for k in listed.json()["items"]] == [created["id"]]
    # The secret is what follows the id (it may hold "_" itself: token_urlsafe).
    secret = key.removeprefix(f"sk_strata_{uuid.UUID(created['id']).hex}_")
    assert len(secret) >= 20
    assert secret not in listed.text
    assert "key" not in listed.json()["items"][0]

    revoked = await keyed.client.delete(f"/v1/admin/keys/{created['id']}", headers=bearer(ADMIN))
    assert revoked.status_code == 200
    again = await keyed.client.delete(f"/v1/admin/keys/{created['id']}", headers=bearer(ADMIN))
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]  # idempotent

    refused = await keyed.client.post(
        "/v1/recall", json={"user_id": user, "query": "x"}, headers=bearer(key)
    )
    assert refused.status_code == 401
    assert refused.json()["code"] == "unauthorized"
    assert refused.headers["www-authenticate"].startswith("Bearer")
    listed = await keyed.client.get(
        "/v1/admin/keys", params={"tenant": tenant}, headers=bearer(ADMIN)
    )
    assert listed.json()["items"] == []
    with_revoked = await keyed.client.get(
        "/v1/admin/keys",
        params={"tenant": tenant, "include_revoked": "true"},
        headers=bearer(ADMIN),
    )
    assert [k["id"] for k in with_revoked.json()["items"]] == [created["id"]]

    unknown = await keyed.client.delete(f"/v1/admin/keys/{uuid.uuid4()}", headers=bearer(ADMIN))
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "key_not_found"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YTpi"},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": f"Bearer sk_strata_{uuid.uuid4().hex}_{'a' * 43}"},
    ],
)
async def test_missing_or_invalid_keys_are_401_with_www_authenticate(
    keyed: Running, headers: dict[str, str]
) -> None:
    for method, path in (("GET", "/v1/memories?user_id=u"), ("POST", "/v1/recall")):
        resp = await keyed.client.request(
            method, path, headers=headers, json={"user_id": "u", "query": "x"}
        )
        assert resp.status_code == 401, resp.text
        assert resp.json()["code"] == "unauthorized"
        assert resp.headers["www-authenticate"].startswith('Bearer realm="strata"')
        assert resp.headers["content-type"] == "application/problem+json"


async def test_a_wrong_secret_for_a_real_key_id_is_401(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    created = await make_key(keyed, tenant=ids("tenant"))
    forged = created["key"][:-4] + ("AAAA" if not created["key"].endswith("AAAA") else "BBBB")
    resp = await keyed.client.get("/v1/memories", params={"user_id": "u"}, headers=bearer(forged))
    assert resp.status_code == 401
    assert 'error="invalid_token"' in resp.headers["www-authenticate"]


async def test_scopes_follow_the_method_and_the_route(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    tenant, user = ids("tenant"), ids("user")
    reader = (await make_key(keyed, tenant=tenant, scopes=["read"]))["key"]
    as_reader = bearer(reader)
    # Reads, and the POST routes that only read.
    assert (
        await keyed.client.get("/v1/memories", params={"user_id": user}, headers=as_reader)
    ).status_code == 200
    assert (
        await keyed.client.post(
            "/v1/recall", json={"user_id": user, "query": "x"}, headers=as_reader
        )
    ).status_code == 200
    assert (
        await keyed.client.post(
            "/v1/rewrite",
            json={"user_id": user, "session_id": ids("s"), "query": "x"},
            headers=as_reader,
        )
    ).status_code in (200, 404)  # the session does not exist: the gate let it through
    # Writes are refused, and say which scope they need.
    write = await keyed.client.post(
        "/v1/memories",
        json={"user_id": user, "content": "x", "memory_type": "semantic"},
        headers=as_reader,
    )
    assert write.status_code == 403
    assert write.json()["code"] == "insufficient_scope"
    assert 'scope="write"' in write.headers["www-authenticate"]
    put = await keyed.client.put(
        f"/v1/sessions/{ids('s')}", json={"user_id": user}, headers=as_reader
    )
    assert put.status_code == 403
    admin = await keyed.client.get("/v1/admin/keys", headers=as_reader)
    assert admin.status_code == 403
    assert 'scope="admin"' in admin.headers["www-authenticate"]

    # The operator's key manages keys but reads no one's data.
    operator = await keyed.client.post(
        "/v1/recall", json={"user_id": user, "query": "x"}, headers=bearer(ADMIN)
    )
    assert operator.status_code == 403
    assert operator.json()["code"] == "insufficient_scope"


async def test_a_tenant_admin_key_manages_its_own_tenant_only(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    mine, other = ids("mine"), ids("other")
    admin = bearer((await make_key(keyed, tenant=mine, scopes=["admin"]))["key"])
    theirs = await make_key(keyed, tenant=other)

    made = await keyed.client.post("/v1/admin/keys", json={"scopes": ["read"]}, headers=admin)
    assert made.status_code == 201
    assert made.json()["tenant"] == mine
    elsewhere = await keyed.client.post("/v1/admin/keys", json={"tenant": other}, headers=admin)
    assert elsewhere.status_code == 403
    assert elsewhere.json()["code"] == "forbidden"
    listed = await keyed.client.get("/v1/admin/keys", headers=admin)
    assert {k["tenant"] for k in listed.json()["items"]} == {mine}
    peek = await keyed.client.get("/v1/admin/keys", params={"tenant": other}, headers=admin)
    assert peek.status_code == 403
    revoke = await keyed.client.delete(f"/v1/admin/keys/{theirs['id']}", headers=admin)
    assert revoke.status_code == 404  # another tenant's key does not exist here
    still = await keyed.client.get(
        "/v1/memories", params={"user_id": "u"}, headers=bearer(theirs["key"])
    )
    assert still.status_code == 200


async def test_a_bound_key_cannot_hold_admin(keyed: Running, ids: Callable[[str], str]) -> None:
    resp = await keyed.client.post(
        "/v1/admin/keys",
        json={"tenant": ids("t"), "user_id": "ana", "scopes": ["read", "admin"]},
        headers=bearer(ADMIN),
    )
    assert resp.status_code == 422
    assert resp.json()["errors"][0]["field"] == "scopes"


async def test_a_key_bound_to_a_user_is_refused_for_any_other_user(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    tenant, ana, bob = ids("tenant"), ids("ana"), ids("bob")
    as_ana = bearer((await make_key(keyed, tenant=tenant, user_id=ana))["key"])
    session = ids("s")

    own = await keyed.client.post(
        f"/v1/sessions/{session}/messages",
        json={"user_id": ana, "messages": [turn("I live in Porto.")]},
        headers=as_ana,
    )
    assert own.status_code == 202, own.text
    assert (
        await keyed.client.get("/v1/users/" + ana + "/summaries", headers=as_ana)
    ).status_code == 200

    probes: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/recall", {"json": {"user_id": bob, "query": "x"}}),
        ("POST", f"/v1/sessions/{session}/context", {"json": {"user_id": bob}}),
        ("GET", "/v1/memories", {"params": {"user_id": bob}}),
        ("GET", f"/v1/memories/{uuid.uuid4()}", {"params": {"user_id": bob}}),
        ("GET", f"/v1/users/{bob}/summaries", {}),
        ("DELETE", f"/v1/sessions/{session}", {"params": {"user_id": bob}}),
        # Two user ids, one of them the bound one: still another user.
        ("GET", "/v1/memories", {"params": [("user_id", ana), ("user_id", bob)]}),
        ("GET", f"/v1/users/{bob}/summaries", {"params": {"user_id": ana}}),
        (
            "POST",
            "/v1/recall",
            {
                "content": f'{{"user_id": "{ana}", "user_id": "{bob}", "query": "x"}}',
                "headers": {"content-type": "application/json"},
            },
        ),
        ("POST", "/v1/recall", {"json": {"user_id": None, "query": "x"}}),
        ("POST", "/v1/recall", {"json": {"user_id": [ana], "query": "x"}}),
        # Naming no user at all: a bound key must name its own.
        ("GET", f"/v1/jobs/{uuid.uuid4()}", {}),
    ]
    for method, path, extra in probes:
        headers = {**as_ana, **extra.pop("headers", {})}
        resp = await keyed.client.request(method, path, headers=headers, **extra)
        assert resp.status_code == 403, (method, path, resp.text)
        assert resp.json()["code"] == "user_not_allowed", (method, path)


async def test_the_legacy_key_is_the_default_tenant_with_every_scope(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    legacy = bearer(LEGACY)
    made = await keyed.client.post(
        "/v1/memories",
        json={"user_id": user, "content": "Likes tea.", "memory_type": "semantic"},
        headers=legacy,
    )
    assert made.status_code == 201
    listed = await keyed.client.get("/v1/memories", params={"user_id": user}, headers=legacy)
    assert [m["id"] for m in listed.json()["items"]] == [made.json()["id"]]
    # A key of the default tenant sees it; another tenant's does not.
    default = bearer((await make_key(keyed, tenant="default", scopes=["read"]))["key"])
    other = bearer((await make_key(keyed, tenant=ids("t"), scopes=["read"]))["key"])
    seen = await keyed.client.get("/v1/memories", params={"user_id": user}, headers=default)
    assert len(seen.json()["items"]) == 1
    unseen = await keyed.client.get("/v1/memories", params={"user_id": user}, headers=other)
    assert unseen.json()["items"] == []
    assert (await keyed.client.get("/v1/admin/keys", headers=legacy)).status_code == 200


async def test_a_spent_rate_limit_is_429_with_retry_after(
    keyed: Running, ids: Callable[[str], str]
) -> None:
    # One token per 100 s: the third request inside a test is refused however slow the test.
    created = await make_key(keyed, tenant=ids("t"), rate_limit_per_second=0.01, rate_limit_burst=2)
    limited, other = bearer(created["key"]), bearer((await make_key(keyed, tenant=ids("t")))["key"])
    codes = []
    for _ in range(3):
        resp = await keyed.client.get("/v1/memories", params={"user_id": "u"}, headers=limited)
        codes.append(resp.status_code)
    assert codes == [200, 200, 429]
    assert resp.json()["code"] == "rate_limited"
    assert 90 <= int(resp.headers["retry-after"]) <= 100
    # Buckets are per key.
    assert (
        await keyed.client.get("/v1/memories", params={"user_id": "u"}, headers=other)
    ).status_code == 200


async def test_the_cli_creates_lists_and_revokes(
    keyed_embedded_app: Running, capsys: pytest.CaptureFixture[str], ids: Callable[[str], str]
) -> None:
    running = keyed_embedded_app
    settings: Settings = running.state["settings"]
    tenant, user = ids("tenant"), ids("user")
    code = await keys_cli.run(
        ["create", "--tenant", tenant, "--user", user, "--scopes", "read"], settings
    )
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    key_id, key = out[0].split()[0], out[1]
    assert key.startswith("sk_strata_")
    ok = await running.client.get("/v1/memories", params={"user_id": user}, headers=bearer(key))
    assert ok.status_code == 200

    assert await keys_cli.run(["list", "--tenant", tenant], settings) == 0
    listed = capsys.readouterr().out
    assert f"user={user}" in listed
    assert key_id in listed
    assert key not in listed

    assert await keys_cli.run(["revoke", key_id], settings) == 0
    assert await keys_cli.run(["revoke", str(uuid.uuid4())], settings) == 1
    assert await keys_cli.run(["create", "--tenant", tenant, "--scopes", "root"], settings) == 1


async def test_the_full_stack_refuses_to_start_without_keys(
    pg_databases: Callable[[], Awaitable[str]], redis_client: Redis, start_app: Any
) -> None:
    settings = full_settings(await pg_databases(), auth_mode=None, worker_in_process=False)
    with pytest.raises(RuntimeError, match="STRATA_ADMIN_KEY"):
        async with start_app(settings):
            pass


async def test_an_embedded_server_without_keys_answers_loopback_only(
    tmp_path: Path, start_app: Any
) -> None:
    async with start_app(embedded_settings(tmp_path)) as running:
        assert running.state["services"].keys.mode == "loopback"
        local = await running.client.get("/v1/memories", params={"user_id": "u"})
        assert local.status_code == 200
        transport = httpx.ASGITransport(app=served(running), client=("203.0.113.9", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://strata") as remote:
            far = await remote.get("/v1/memories", params={"user_id": "u"})
            assert far.status_code == 403
            assert far.json()["code"] == "loopback_only"
            assert (await remote.get("/healthz")).status_code == 200


async def test_explicit_open_mode_answers_everyone_as_the_default_tenant(
    tmp_path: Path, start_app: Any
) -> None:
    async with start_app(embedded_settings(tmp_path, auth_mode="open")) as running:
        transport = httpx.ASGITransport(app=served(running), client=("203.0.113.9", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://strata") as remote:
            resp = await remote.get("/v1/memories", params={"user_id": "u"})
            assert resp.status_code == 200


async def test_keys_created_by_the_cli_make_an_embedded_server_require_them(
    tmp_path: Path, start_app: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = embedded_settings(tmp_path)
    assert await keys_cli.run(["create", "--tenant", "acme"], settings) == 0
    key = capsys.readouterr().out.splitlines()[1]
    async with start_app(settings) as running:
        assert running.state["services"].keys.mode == "keys"
        assert (
            await running.client.get("/v1/memories", params={"user_id": "u"})
        ).status_code == 401
        assert (
            await running.client.get("/v1/memories", params={"user_id": "u"}, headers=bearer(key))
        ).status_code == 200


class FrozenRedis:
    """A TCP server that accepts connections and never answers, as a Redis stopped with
    SIGSTOP looks to its clients; it counts the connections made to it."""

    def __init__(self) -> None:
        self.connections = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        while await reader.read(4096):  # swallowed, never answered
            pass

    async def __aenter__(self) -> FrozenRedis:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"redis://127.0.0.1:{port}/0"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def frozen_redis() -> AsyncIterator[FrozenRedis]:
    async with FrozenRedis() as server:
        yield server


async def test_a_frozen_redis_costs_one_time_out_a_window_and_the_process_bucket_limits(
    frozen_redis: FrozenRedis,
) -> None:
    """Redis frozen, the key is still limited (by the process's bucket), and the breaker
    sends only the first call of a retry window to the frozen server: the others do not
    each wait out the time-out (they used to, and were all let through)."""
    client = Redis.from_url(
        frozen_redis.url,
        socket_timeout=0.2,
        socket_connect_timeout=0.2,
        retry=Retry(NoBackoff(), 0),  # as the app's client (app/resources.py)
    )
    breaker = Breaker(retry_seconds=600)
    limiter = RedisRateLimiter(client, breaker=breaker, timeout=0.2)
    try:
        waits = [await limiter.take("k", 0.01, 2) for _ in range(30)]
        assert waits[:2] == [0, 0]
        assert all(90 <= wait <= 100 for wait in waits[2:])
        assert frozen_redis.connections == 1
        assert breaker.open
        # The window over, the next call tries Redis again, once, and falls back again.
        breaker._skip_until = 0
        assert 90 <= await limiter.take("k", 0.01, 2) <= 100
        assert await limiter.take("other", 0.01, 2) == 0
        assert frozen_redis.connections == 2
    finally:
        await client.aclose()


async def test_a_key_is_limited_while_the_apps_redis_is_frozen(
    pg_databases: Callable[[], Awaitable[str]],
    start_app: Callable[[Settings], Any],
    frozen_redis: FrozenRedis,
    ids: Callable[[str], str],
) -> None:
    """The app's Redis accepts and never answers: requests past the key's burst are 429
    and, past the first, no request opens a connection to the frozen server."""
    settings = full_settings(
        await pg_databases(),
        redis_url=frozen_redis.url,
        redis_retry_seconds=600,
        auth_mode="keys",
        admin_key=ADMIN,
    )
    async with start_app(settings) as running:
        created = await make_key(
            running, tenant=ids("t"), rate_limit_per_second=0.01, rate_limit_burst=2
        )
        limited = bearer(created["key"])

        seconds: list[float] = []

        async def get() -> int:
            start = time.perf_counter()
            # A hang guard only: the default client would wait as long as the server.
            resp: httpx.Response = await asyncio.wait_for(
                running.client.get("/v1/memories", params={"user_id": "u"}, headers=limited),
                30,
            )
            seconds.append(time.perf_counter() - start)
            return resp.status_code

        codes = [await get()]
        after_first = frozen_redis.connections
        codes += [await get() for _ in range(29)]
        assert codes == [200, 200] + [429] * 28
        assert frozen_redis.connections == after_first
        assert running.resources.buffer.breaker.open
        print("frozen Redis, rate-limited key, seconds (median):", statistics.median(seconds))


async def test_the_redis_bucket_is_shared_and_falls_back_to_the_process(
    redis_client: Redis,
) -> None:
    bucket = f"test-{uuid.uuid4().hex}"
    one, two = RedisRateLimiter(redis_client), RedisRateLimiter(redis_client)  # two replicas
    assert await one.take(bucket, 0.01, 2) == 0
    assert await two.take(bucket, 0.01, 2) == 0
    wait = await one.take(bucket, 0.01, 2)
    assert 90 <= wait <= 100
    assert await two.take(f"{bucket}-other", 0.01, 2) == 0  # another key's bucket is full
    # Redis away: the process's own bucket limits the key (a cache outage must neither
    # refuse everyone nor lift the limit).
    down = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        alone = RedisRateLimiter(down)
        assert await alone.take(bucket, 0.01, 2) == 0
        assert await alone.take(bucket, 0.01, 2) == 0
        assert 90 <= await alone.take(bucket, 0.01, 2) <= 100
    finally:
        await down.aclose()


async def test_the_process_bucket_refills_with_time() -> None:
    limiter = LocalRateLimiter()
    assert await limiter.take("k", 1000.0, 1) == 0
    wait = await limiter.take("k", 1000.0, 1)
    assert 0 < wait <= 0.001
    await asyncio.sleep(0.01)
    assert await limiter.take("k", 1000.0, 1) == 0
