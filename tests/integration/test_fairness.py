"""Fair background work: promotion takes bounded slices and serves users in turns, so one
user's huge import cannot hold back another user's `wait=true`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from app.stores.models import Session
from app.wiring import build_promoter
from tests.conftest import Running, embedded_settings, full_settings, post_messages, turn


@pytest.fixture
async def idle_app(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[..., Any]
) -> AsyncIterator[Running]:
    """PostgreSQL + Redis with no worker running: the test drives promotion itself."""
    settings = full_settings(
        await pg_databases(), worker_in_process=False, worker_slice_chars=5_000
    )
    async with start_app(settings) as running:
        yield running


async def watermarks(running: Running, *sessions: str) -> list[int]:
    async with running.resources.db.read() as tx:
        # By id alone: each of these session ids has one user here.
        rows = await tx.execute(
            sa.select(Session.id, Session.indexed_seq).where(
                Session.tenant_id == "default", Session.id.in_(sessions)
            )
        )
        found = {str(r[0]): int(r[1]) for r in rows}
        return [found.get(s, 0) for s in sessions]


def long_turn(i: int, chars: int) -> dict[str, Any]:
    text = f"imported page {i}: " + " ".join(f"word{i}x{j}" for j in range(chars // 10))
    return turn(text[:chars], id=f"p{i}")


async def test_a_pass_takes_a_bounded_slice_of_a_big_backlog_and_serves_the_other_user(
    idle_app: Running,
) -> None:
    await post_messages(
        idle_app, "big-import", "alice", [long_turn(i, 3_000) for i in range(20)], wait=False
    )
    await post_messages(idle_app, "small", "bob", [turn("my locker code is 4417")], wait=False)
    promoter = build_promoter(idle_app.resources, "w")
    # One pass: 3,000 + 3,000 characters is over the 5,000 of a slice, so one page of
    # alice's; bob's message in the same pass.
    assert await promoter.run_once() == 2
    assert await watermarks(idle_app, "big-import", "small") == [1, 1]


async def test_users_take_turns_whatever_their_number_of_sessions(idle_app: Running) -> None:
    for s in range(3):
        await post_messages(
            idle_app, f"many-{s}", "carol", [long_turn(i, 3_000) for i in range(4)], wait=False
        )
    await post_messages(idle_app, "one", "dave", [turn("dave's only note")], wait=False)
    promoter = build_promoter(idle_app.resources, "w")
    served: list[str] = []
    for _ in range(4):
        before = await watermarks(idle_app, "many-0", "many-1", "many-2", "one")
        assert await promoter.run_once(max_sessions=1) == 1
        after = await watermarks(idle_app, "many-0", "many-1", "many-2", "one")
        [moved] = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b > a]
        served.append("dave" if moved == 3 else f"carol/{moved}")
    # carol's sessions were first in line, but dave's turn comes right after one slice,
    # and carol's sessions then take turns among themselves.
    assert served[:2] == ["carol/0", "dave"]
    assert served[2:] == ["carol/1", "carol/2"]


async def test_a_wait_of_another_user_is_answered_while_a_big_import_is_promoted(
    start_app: Callable[..., Any], tmp_path: Path
) -> None:
    """With the in-process worker and the real model: bob's one-message `wait=true` is
    indexed while alice's backlog (one page per slice) is still far from done."""
    settings = embedded_settings(tmp_path, worker_slice_chars=2_000)
    async with start_app(settings) as app:
        pages = [long_turn(i, 1_500) for i in range(200)]
        for start in range(0, 200, 100):  # a request holds at most 200,000 characters
            await post_messages(app, "import", "alice", pages[start : start + 100], wait=False)
        answer = await post_messages(app, "chat", "bob", [turn("I parked on level 3")])
        assert answer["indexed_seq"] == 1
        [alice] = await watermarks(app, "import")
        assert alice < 200  # bob did not wait for alice's import
        listed = await app.client.get("/v1/sessions/import", params={"user_id": "alice"})
        assert listed.json()["last_seq"] == 200
        # The bulk-import path: one wait on the watermark, answered when all is indexed.
        waited = await app.client.get(
            "/v1/sessions/import", params={"user_id": "alice", "wait": "true"}
        )
        assert waited.status_code == 200
        assert waited.json()["indexed_seq"] == 200
        memories = await app.client.get("/v1/memories", params={"user_id": "alice", "limit": 200})
        assert len(memories.json()["items"]) == 200


@pytest.mark.parametrize("mode", ["embedded", "full"])
async def test_a_wait_is_ended_by_the_workers_signal(
    mode: str,
    start_app: Callable[..., Any],
    tmp_path: Path,
    pg_databases: Callable[[], Awaitable[str]],
) -> None:
    """With the watermark never re-read while waiting (`wait_poll_seconds` beyond the
    wait's time-out), each `wait=true` can only end indexed if the worker woke it."""
    quiet = {"wait_poll_seconds": 600, "wait_timeout_seconds": 120}
    settings = (
        embedded_settings(tmp_path, **quiet)
        if mode == "embedded"
        else full_settings(await pg_databases(), **quiet)
    )
    async with start_app(settings) as app:
        for batch in range(5):
            messages = [turn(f"batch {batch} fact {i}", id=f"b{batch}m{i}") for i in range(10)]
            answer = await post_messages(app, "waited", "erin", messages)
            assert answer["indexed_seq"] == answer["last_seq"] == (batch + 1) * 10


@pytest.mark.parametrize("mode", ["embedded", "full"])
async def test_a_worker_gathers_a_trickle_and_a_waiting_request_ends_the_pause(
    mode: str,
    start_app: Callable[..., Any],
    tmp_path: Path,
    pg_databases: Callable[[], Awaitable[str]],
) -> None:
    """With a long pause after a pass that took all there was (`worker_debounce_seconds`
    5 s): a message sent without waiting stays unindexed during the pause; a `wait=true`,
    of a message or of the session's watermark, ends it and is answered indexed before its
    own 4.5 s time-out (the watermark is never re-read while waiting).

    The first message may be claimed by a pass that began before its request said it
    would wait (the worker's start-up or poll pass): the request's urgency then outlives
    it, the worker runs one more (empty) pass and promotes the next message at once, as
    after any idle pass. So the pause is shown on the message after that one."""
    quiet = {"worker_debounce_seconds": 5, "wait_timeout_seconds": 4.5, "wait_poll_seconds": 600}
    settings = (
        embedded_settings(tmp_path, **quiet)
        if mode == "embedded"
        else full_settings(await pg_databases(), **quiet)
    )
    async with start_app(settings) as app:
        first = await post_messages(app, "trickle", "fay", [turn("the gate code is 1234")])
        assert first["indexed_seq"] == 1  # no pause before a pass
        for text in ("the bike is blue", "the kite is yellow"):
            await post_messages(app, "trickle", "fay", [turn(text)], wait=False)
            await asyncio.sleep(0.5)  # longer than a pass: only a pause leaves it unindexed
        session = await app.client.get("/v1/sessions/trickle", params={"user_id": "fay"})
        assert session.json()["indexed_seq"] in (1, 2)  # gathered: the worker pauses
        fourth = await post_messages(app, "trickle", "fay", [turn("the car is red")])
        assert fourth["indexed_seq"] == 4
        await post_messages(app, "trickle", "fay", [turn("the boat is green")], wait=False)
        waited = await app.client.get(
            "/v1/sessions/trickle", params={"user_id": "fay", "wait": "true"}
        )
        assert waited.json()["indexed_seq"] == 5


async def test_a_pass_that_leaves_a_backlog_says_so(idle_app: Running) -> None:
    """The worker pauses to gather only after a pass that took all there was: an import
    bigger than a slice goes on at once, pass after pass."""
    await post_messages(
        idle_app, "import", "gus", [long_turn(i, 3_000) for i in range(3)], wait=False
    )
    promoter = build_promoter(idle_app.resources, "w")
    assert await promoter.run_once() == 1  # a 5,000-character slice holds one page
    assert promoter.left_backlog
    assert await promoter.run_once() == 1
    assert promoter.left_backlog
    assert await promoter.run_once() == 1
    assert not promoter.left_backlog
    await post_messages(idle_app, "other", "hal", [turn("one")], wait=False)
    await post_messages(idle_app, "another", "ian", [turn("two")], wait=False)
    assert await promoter.run_once(max_sessions=1) == 1
    assert promoter.left_backlog  # more users than the pass claims
    assert await promoter.run_once(max_sessions=1) == 1
    assert not promoter.left_backlog
    # One user's two sessions: a pass claims one session per user.
    await post_messages(idle_app, "first", "jo", [turn("three")], wait=False)
    await post_messages(idle_app, "second", "jo", [turn("four")], wait=False)
    assert await promoter.run_once() == 1
    assert promoter.left_backlog
    assert await promoter.run_once() == 1
    assert not promoter.left_backlog
    assert await promoter.run_once() == 0


async def test_an_import_bigger_than_a_slice_is_promoted_without_pauses(
    start_app: Callable[..., Any], tmp_path: Path
) -> None:
    """With a 5 s pause after a pass that took all there was, an import of four slices
    (over two sessions of one user) is indexed pass after pass, without anyone waiting:
    well before a single pause would have ended."""
    settings = embedded_settings(tmp_path, worker_debounce_seconds=5, worker_slice_chars=2_000)
    async with start_app(settings) as app:
        for session in ("import-a", "import-b"):
            await post_messages(
                app, session, "kim", [long_turn(i, 1_500) for i in range(2)], wait=False
            )
        indexed: list[int] = []
        for _ in range(45):  # 4.5 s
            indexed = [
                (await app.client.get(f"/v1/sessions/{s}", params={"user_id": "kim"})).json()[
                    "indexed_seq"
                ]
                for s in ("import-a", "import-b")
            ]
            if indexed == [2, 2]:
                break
            await asyncio.sleep(0.1)
        assert indexed == [2, 2]
