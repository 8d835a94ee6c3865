"""ContextCache on its own: an entry serves while its counters are unchanged and it is
young; a bump, age or eviction sends the next call to the database."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from app.schemas.context import SummaryOut
from app.schemas.profile import Profile, ProfileFact
from app.services.context import stored_size
from app.services.context_cache import ContextCache
from app.stores.buffer import Breaker
from app.stores.changes import EVERYONE
from app.stores.generations import Generations

BEFORE = datetime(2026, 1, 1, tzinfo=UTC)


class Reads:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> int:
        self.count += 1
        return self.count


def cache(ttl: float = 60, max_bytes: int = 8) -> ContextCache:
    """Each value weighs 1 byte: `max_bytes` entries fit."""
    return ContextCache(Generations(None, Breaker(1)), ttl_seconds=ttl, max_bytes=max_bytes)


async def test_a_bump_of_the_user_or_of_everyone_ends_the_entry() -> None:
    c, read = cache(), Reads()
    assert [await c.get("t", "u", BEFORE, read) for _ in range(3)] == [1, 1, 1]
    await c.generations.bump({("t", "other")})
    assert await c.get("t", "u", BEFORE, read) == 1
    await c.generations.bump({("t", "u")})
    assert await c.get("t", "u", BEFORE, read) == 2
    await c.generations.bump({EVERYONE})
    assert await c.get("t", "u", BEFORE, read) == 3
    assert (c.hits, c.misses) == (3, 3)


async def test_where_the_turns_begin_is_part_of_the_key() -> None:
    c, read = cache(), Reads()
    assert await c.get("t", "u", BEFORE, read) == 1
    assert await c.get("t", "u", BEFORE.replace(day=2), read) == 2
    assert await c.get("t", "u", BEFORE, read) == 1


async def test_age_ends_an_entry() -> None:
    now = [1000.0]
    c, read = cache(ttl=5), Reads()
    c.clock = lambda: now[0]
    assert await c.get("t", "u", BEFORE, read) == 1
    now[0] += 4.9
    assert await c.get("t", "u", BEFORE, read) == 1
    now[0] += 0.2
    assert await c.get("t", "u", BEFORE, read) == 2


async def test_the_least_recently_used_goes_first_and_zero_seconds_is_off() -> None:
    c, read = cache(max_bytes=2), Reads()
    await c.get("t", "a", BEFORE, read)  # 1
    await c.get("t", "b", BEFORE, read)  # 2
    await c.get("t", "a", BEFORE, read)  # a used again: b is the oldest now
    await c.get("t", "c", BEFORE, read)  # 3, evicts b
    assert await c.get("t", "a", BEFORE, read) == 1
    assert await c.get("t", "b", BEFORE, read) == 4

    off, reads = cache(ttl=0), Reads()
    assert [await off.get("t", "u", BEFORE, reads) for _ in range(2)] == [1, 2]


async def test_the_bound_is_on_what_the_entries_hold() -> None:
    c = ContextCache(
        Generations(None, Breaker(1)), ttl_seconds=60, max_bytes=10, weigh=lambda v: len(v)
    )

    def value(text: str) -> Callable[[], Awaitable[str]]:
        async def read() -> str:
            return text

        return read

    await c.get("t", "a", BEFORE, value("aaaa"))
    await c.get("t", "b", BEFORE, value("bbbb"))
    assert c.size == 8
    await c.get("t", "c", BEFORE, value("cccc"))  # 12 > 10: the oldest, a, goes
    assert c.size == 8
    assert await c.get("t", "a", BEFORE, value("new")) == "new"  # read again
    await c.get("t", "huge", BEFORE, value("x" * 11))  # larger than the cache: not kept
    assert "huge" not in {k[1] for k in c._items}
    assert c.size <= 10


def test_a_profile_and_summaries_weigh_what_their_text_holds() -> None:
    fact = ProfileFact(
        id=uuid.uuid4(),
        content="x" * 10_000,
        memory_type="semantic",
        importance=0.5,
        valid_from=None,
        created_at=BEFORE,
        sources=[],
    )
    small = stored_size((Profile(user_id="u", attributes={}, facts=[]), []))
    big = stored_size(
        (
            Profile(user_id="u", attributes={"notes": "y" * 5_000}, facts=[fact]),
            [SummaryOut(level="daily", period_start=BEFORE, content="z" * 2_000)],
        )
    )
    assert small < 1_000
    assert big >= 17_000
