"""Context's cached profile and summaries (app/services/context_cache.py), through the API
in both modes: a call right after a write shows the write; a call after writes that cannot
change them (new turns promoted, recalls reinforcing) is answered from the cache; and in
the full stack a write in one api process ends the entry of another."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from redis.asyncio import Redis

from app.services.context_cache import ContextCache
from app.stores.buffer import Breaker
from app.stores.generations import Generations, _key
from tests.conftest import Running, full_settings, post_messages, settle, turn
from tests.integration.test_summaries import at, wait_for

MERGE = {"content-type": "application/merge-patch+json"}


def cache_of(running: Running) -> ContextCache:
    cache = running.state["services"].context.cache
    assert isinstance(cache, ContextCache)
    return cache


async def context(running: Running, session: str, user: str) -> dict[str, Any]:
    resp = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 3000}
    )
    assert resp.status_code == 200, resp.text
    sections: dict[str, Any] = resp.json()["sections"]
    return sections


def facts(sections: dict[str, Any]) -> list[str]:
    return [f["content"] for f in sections["profile"].get("facts", [])]


async def test_a_write_shows_on_the_next_call_and_turns_keep_the_entry(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    cache = cache_of(running)
    await post_messages(running, session, user, [turn("What should I cook tonight?")])
    assert (await context(running, session, user))["profile"] == {}
    hits = cache.hits
    assert (await context(running, session, user))["profile"] == {}
    assert cache.hits == hits + 1  # nothing written: the second call read no SQL for it

    patched = await running.client.patch(
        f"/v1/users/{user}/profile", content=orjson.dumps({"city": "Porto"}), headers=MERGE
    )
    assert patched.status_code == 200, patched.text
    assert (await context(running, session, user))["profile"]["attributes"] == {"city": "Porto"}

    made = await running.client.post(
        "/v1/memories",
        json={"user_id": user, "content": "The user is vegetarian.", "memory_type": "semantic"},
    )
    assert made.status_code == 201, made.text
    assert facts(await context(running, session, user)) == ["The user is vegetarian."]
    fact_id = made.json()["id"]
    edited = await running.client.patch(
        f"/v1/memories/{fact_id}", json={"user_id": user, "content": "The user is vegan."}
    )
    assert edited.status_code == 200, edited.text
    assert facts(await context(running, session, user)) == ["The user is vegan."]

    # New turns promoted and a recall that reinforces what it found change neither.
    hits = cache.hits
    await post_messages(running, session, user, [turn("Something with tofu, maybe?")])
    found = await running.client.post(
        "/v1/recall", json={"user_id": user, "query": "cook tofu", "reinforce": True}
    )
    assert found.status_code == 200, found.text
    await settle(running)
    assert facts(await context(running, session, user)) == ["The user is vegan."]
    assert cache.hits == hits + 1

    deleted = await running.client.delete(f"/v1/memories/{fact_id}", params={"user_id": user})
    assert deleted.status_code == 204, deleted.text
    assert facts(await context(running, session, user)) == []


async def test_a_summary_written_by_the_worker_shows_on_the_next_call(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, earlier, today = ids("user"), ids("earlier"), ids("today")
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    await post_messages(
        running, earlier, user, [turn("I moved to Lisbon in March.", created_at=at(yesterday, 9))]
    )
    await post_messages(running, today, user, [turn("Where should I eat tonight?")])
    assert (await context(running, today, user))["summaries"] == []

    asked = await running.client.post("/v1/summarize", json={"user_id": user, "level": "daily"})
    assert asked.status_code == 202, asked.text
    job_id = asked.json()["job_id"]

    async def done() -> bool:
        job = (await running.client.get(f"/v1/jobs/{job_id}")).json()
        return bool(job["state"] == "succeeded")

    await wait_for(done)
    summaries = (await context(running, today, user))["summaries"]
    # On a Monday yesterday closed a week: the daily is carried up to the weekly and the
    # essence, which shows beside it (the run on 2026-12-07 found it).
    daily = [s for s in summaries if s["level"] == "daily"]
    assert len(daily) == 1, summaries
    assert "Lisbon" in daily[0]["content"]
    assert {s["level"] for s in summaries} <= {"daily", "essence"}


async def test_a_patch_in_another_api_process_ends_the_entry(
    full_app: Running,
    pg_database: str,
    start_app: Callable[..., Any],
    ids: Callable[[str], str],
) -> None:
    """Two apps on one PostgreSQL and Redis are two api processes: each has its own cache,
    and the counters they share in Redis carry the other's writes."""
    user, session = ids("user"), ids("session")
    await post_messages(full_app, session, user, [turn("Plan my week, please.")])
    await context(full_app, session, user)
    hits = cache_of(full_app).hits
    await context(full_app, session, user)
    assert cache_of(full_app).hits == hits + 1

    async with start_app(full_settings(pg_database, worker_in_process=False)) as other:
        patched = await other.client.patch(
            f"/v1/users/{user}/profile",
            content=orjson.dumps({"tz": "Asia/Shanghai"}),
            headers=MERGE,
        )
        assert patched.status_code == 200, patched.text
    sections = await context(full_app, session, user)
    assert sections["profile"]["attributes"] == {"tz": "Asia/Shanghai"}


async def test_without_redis_nothing_is_trusted_and_nothing_fails() -> None:
    """Counters that cannot be read make every call read SQL; a bump that cannot be sent
    is logged, never raised into the write that committed."""
    redis = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    generations = Generations(redis, Breaker(retry_seconds=30))
    await generations.bump({("t", "u")})
    assert await generations.current("t", "u") is None

    cache = ContextCache(generations, ttl_seconds=60, max_bytes=2**20)
    reads = 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        return reads

    before = datetime(2026, 1, 1, tzinfo=UTC)
    assert [await cache.get("t", "u", before, read) for _ in range(3)] == [1, 2, 3]
    await redis.aclose()


async def test_a_redis_that_lost_its_keys_or_a_failed_bump_trusts_no_old_entry(
    redis_client: Redis,
) -> None:
    """A key lost and set again (evicted, Redis restarted without persistence) must not
    match entries stamped before, as a count starting again at 1 would; and a bump this
    process could not send ends its own entries."""
    generations = Generations(redis_client, Breaker(retry_seconds=0))
    cache = ContextCache(generations, ttl_seconds=60, max_bytes=2**20)
    user = ("t-lost", uuid.uuid4().hex)
    reads = 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        return reads

    before = datetime(2026, 1, 1, tzinfo=UTC)
    await generations.bump({user})
    first = await cache.get(*user, before, read)
    assert await cache.get(*user, before, read) == first  # cached

    await redis_client.delete(_key(user))  # lost ...
    await generations.bump({user})  # ... and set again by the next write
    second = await cache.get(*user, before, read)
    assert second != first
    assert await cache.get(*user, before, read) == second

    generations.redis = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    await generations.bump({user})  # lost: no other process hears of it
    await generations.redis.aclose()
    generations.redis = redis_client
    assert await cache.get(*user, before, read) != second  # not trusted here


async def test_processes_that_could_not_tell_each_other_cache_nothing(
    pg_database: str, start_app: Callable[..., Any], ids: Callable[[str], str]
) -> None:
    """A Qdrant server and no Redis: api processes and workers may share the database, and
    no change mark would reach the others, so context reads SQL on every call."""
    settings = full_settings(pg_database, redis_url=None, worker_in_process=True)
    async with start_app(settings) as alone:
        assert alone.state["services"].context.cache is None
        user, session = ids("user"), ids("session")
        await post_messages(alone, session, user, [turn("Hello there.")])
        patched = await alone.client.patch(
            f"/v1/users/{user}/profile", content=orjson.dumps({"a": 1}), headers=MERGE
        )
        assert patched.status_code == 200, patched.text
        assert (await context(alone, session, user))["profile"]["attributes"] == {"a": 1}
