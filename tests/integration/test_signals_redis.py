"""Wake-ups across processes over real Redis pub/sub: a request that waits for the index in
one process ends the pause of the workers in the others, and not its own worker's twice."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from app.core import keys
from app.stores.buffer import URGENT_WAKE, WAKE, Breaker, Buffer, pubsub_channel
from app.stores.loops import Wakeup
from app.stores.signals import Signals
from tests.conftest import REDIS_URL


async def _next_wake(pubsub: object) -> bytes:
    for _ in range(50):
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)  # type: ignore[attr-defined]
        if message is not None:
            data: bytes = message["data"]
            return data
    raise AssertionError("no wake-up was published")


async def test_what_ingest_and_a_waiting_request_publish() -> None:
    """Plain ingest publishes b"1"; ingest that a request will wait on, and the wait
    itself, publish this process's tagged urgent wake-up."""
    redis = Redis.from_url(REDIS_URL)
    pubsub = redis.pubsub()
    await pubsub.subscribe(pubsub_channel(redis, WAKE))
    try:
        buffer = Buffer(redis, window=10, ttl_seconds=60)
        message = [{"seq": 1, "content": "x"}]
        await buffer.push("t", "u", "signals-test", message, wake=True)
        assert await _next_wake(pubsub) == b"1"
        await buffer.push("t", "u", "signals-test", message, wake=True, urgent=True)
        assert await _next_wake(pubsub) == URGENT_WAKE
        await Signals(redis, Breaker(retry_seconds=5)).hurry()
        assert await _next_wake(pubsub) == URGENT_WAKE
        assert URGENT_WAKE.startswith(b"2:")
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
        await redis.delete(
            "strata:{t/u/signals-test}:window", "strata:{t/u/signals-test}:scratchpad"
        )
        await redis.aclose()


async def _publish_until(
    event: asyncio.Event | Wakeup, publish: Callable[[], Awaitable[object]]
) -> None:
    """Publish until `event` is set: the subscription goes live in the background, and
    the channel's subscriber count cannot tell when (other tests' apps subscribe too)."""
    for _ in range(50):
        await publish()
        try:
            await asyncio.wait_for(event.wait(), 0.1)
            return
        except TimeoutError:
            continue
    raise AssertionError("the wake-up was never heard")


async def test_another_processes_urgent_wake_up_hurries_this_worker_and_its_own_does_not() -> None:
    redis, publisher = Redis.from_url(REDIS_URL), Redis.from_url(REDIS_URL)
    worker = Signals(redis, Breaker(retry_seconds=5))
    worker.start()
    wakes = worker.wake_channel
    try:
        # Our own, heard back: work to do, but nothing urgent.
        await _publish_until(worker.work, lambda: publisher.publish(wakes, URGENT_WAKE))
        await asyncio.sleep(0.2)
        assert not worker.urgent.is_set()
        # Another process's.
        other = b"2:" + b"f" * 12
        await _publish_until(worker.urgent, lambda: publisher.publish(wakes, other))
    finally:
        await worker.close()
        await publisher.aclose()
        await redis.aclose()


def _in_db(db: int) -> Redis:
    return Redis.from_url(REDIS_URL.rsplit("/", 1)[0] + f"/{db}")


async def test_deployments_in_two_databases_of_one_server_do_not_hear_each_other() -> None:
    """Pub/sub ignores the database: without the database in the channel, an index advance
    of a like-named session in the other deployment would answer this one's waiting request
    as indexed, and its wake-ups would end this worker's pauses (a flaky test under two
    pytest workers showed it)."""
    ours_redis, theirs_redis = _in_db(11), _in_db(12)
    ours = Signals(ours_redis, Breaker(retry_seconds=5))
    theirs = Signals(theirs_redis, Breaker(retry_seconds=5))
    ours.start()
    try:
        with ours.watch("default", "fay", "trickle") as watch:
            # Ours is subscribed once our own advance from another process is heard.
            async def advance_ours() -> None:
                await ours_redis.publish(
                    ours.indexed_channel, keys.indexed_message("default", "fay", "trickle", 1)
                )

            async def heard() -> None:
                while watch.seq < 1:
                    await watch.wait(0.1)

            for _ in range(50):
                await advance_ours()
                try:
                    await asyncio.wait_for(heard(), 0.1)
                    break
                except TimeoutError:
                    continue
            assert watch.seq == 1
            await theirs.indexed("default", "fay", "trickle", 9)
            await theirs.hurry()
            await asyncio.sleep(0.3)
            assert watch.seq == 1
            assert not ours.urgent.is_set()
    finally:
        await ours.close()
        await ours_redis.aclose()
        await theirs_redis.aclose()
