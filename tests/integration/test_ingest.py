"""Ingest: the log, idempotent retries, ownership, the buffer, and import at scale."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from app.services.cursors import encode_cursor
from app.stores.buffer import _window_key
from app.stores.models import Message
from tests.conftest import Running, post_messages, recall, turn


async def test_messages_become_searchable_with_their_sources(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    body = await post_messages(
        running,
        session,
        user,
        [
            turn("I moved to Lisbon last May and the trams are lovely.", id="m1"),
            turn("How do you like Portugal?", role="assistant", id="m2"),
            turn("我最喜欢吃北京烤鸭。", id="m3"),
        ],
    )
    assert body == {"accepted": 3, "duplicates": 0, "last_seq": 3, "indexed_seq": 3}

    results = await recall(running, user, "Lisbon trams", top_k=3)
    assert results[0]["content"].endswith("I moved to Lisbon last May and the trams are lovely.")
    assert results[0]["sources"] == [{"session_id": session, "message_id": "m1", "seq": 1}]
    for r in results:
        for value in (r["score"], *r["scores"].values()):
            assert 0.0 <= value <= 1.0

    chinese = await recall(running, user, "北京烤鸭", top_k=1)
    assert chinese[0]["sources"][0]["message_id"] == "m3"


async def test_retry_with_the_same_ids_is_counted_as_duplicates(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    batch = [turn(f"note number {i} about the garden", id=f"n{i}") for i in range(5)]
    first = await post_messages(running, session, user, batch)
    again = await post_messages(running, session, user, [*batch, turn("a new one", id="n5")])
    assert first["accepted"] == 5
    assert again == {"accepted": 1, "duplicates": 5, "last_seq": 6, "indexed_seq": 6}

    page = await running.client.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
    assert [m["id"] for m in page.json()["items"]] == [f"n{i}" for i in range(6)]
    mem = await running.client.get("/v1/memories", params={"user_id": user, "limit": 200})
    assert len(mem.json()["items"]) == 6


async def test_a_retry_of_stored_messages_leaves_the_session_as_it_was(
    running: Running, ids: Callable[[str], str]
) -> None:
    """The session's advance is taken before the duplicates are known: a request whose
    messages are all stored must roll it back, not leave `last_seq` ahead of the log."""
    user, session = ids("user"), ids("session")
    batch = [turn(f"line {i}", id=f"d{i}") for i in range(3)]
    await post_messages(running, session, user, batch, wait=False)
    before = (await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})).json()
    again = await post_messages(running, session, user, batch, wait=False)
    after = (await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})).json()
    assert (again["accepted"], again["duplicates"], again["last_seq"]) == (0, 3, 3)
    assert (after["last_seq"], after["updated_at"]) == (before["last_seq"], before["updated_at"])

    more = await post_messages(running, session, user, [*batch, turn("fourth", id="d3")])
    assert (more["accepted"], more["last_seq"]) == (1, 4)


async def test_a_retry_of_one_stored_message_is_a_duplicate_and_changes_nothing(
    running: Running, ids: Callable[[str], str]
) -> None:
    """One message with an id is written by a statement that skips a stored id (no read
    first): its retry must still count as a duplicate, keep the original text, and leave
    the session's `last_seq` and `updated_at` as they were."""
    user, session = ids("user"), ids("session")
    first = await post_messages(running, session, user, [turn("original", id="r1")], wait=False)
    assert (first["accepted"], first["duplicates"], first["last_seq"]) == (1, 0, 1)
    before = (await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})).json()
    again = await post_messages(running, session, user, [turn("changed", id="r1")], wait=False)
    assert (again["accepted"], again["duplicates"], again["last_seq"]) == (0, 1, 1)
    after = (await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})).json()
    assert (after["last_seq"], after["updated_at"]) == (before["last_seq"], before["updated_at"])
    page = (
        await running.client.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
    ).json()
    assert [m["content"] for m in page["items"]] == ["original"]
    nxt = await post_messages(running, session, user, [turn("next", id="r2")], wait=False)
    assert (nxt["accepted"], nxt["last_seq"]) == (1, 2)


async def test_same_id_twice_in_one_batch_is_stored_once(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    body = await post_messages(
        running, session, user, [turn("first", id="x"), turn("second", id="x")], wait=False
    )
    assert body["accepted"] == 1
    assert body["duplicates"] == 1


async def test_messages_without_ids_get_seq_ids_and_history_pages_newest_last(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn(f"line {i}") for i in range(7)], wait=False)
    first = await running.client.get(
        f"/v1/sessions/{session}/messages", params={"user_id": user, "limit": 3}
    )
    page = first.json()
    assert [m["seq"] for m in page["items"]] == [5, 6, 7]
    assert page["items"][0]["id"] == "seq:5"
    older = await running.client.get(
        f"/v1/sessions/{session}/messages",
        params={"user_id": user, "limit": 3, "cursor": page["next_cursor"]},
    )
    assert [m["seq"] for m in older.json()["items"]] == [2, 3, 4]
    # `before_seq` still pages by seq, as documented.
    by_seq = await running.client.get(
        f"/v1/sessions/{session}/messages",
        params={"user_id": user, "limit": 3, "before_seq": 5},
    )
    assert [m["seq"] for m in by_seq.json()["items"]] == [2, 3, 4]


async def test_history_pages_by_cursor_through_every_message_once(
    running: Running, ids: Callable[[str], str]
) -> None:
    """120 messages, 50 a page: each page newest last, `next_cursor` as `cursor` gives the
    page before it, and the pages hold every message once, in order. The cursor was ignored
    (the newest 50 again, forever)."""
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn(f"line {i}") for i in range(120)], wait=False)
    pages: list[list[int]] = []
    params: dict[str, Any] = {"user_id": user, "limit": 50}
    for _ in range(5):  # a bound: 3 pages are expected
        resp = await running.client.get(f"/v1/sessions/{session}/messages", params=params)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        pages.append([m["seq"] for m in body["items"]])
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]
    assert [len(p) for p in pages] == [50, 50, 20]
    seqs = [seq for page in reversed(pages) for seq in page]
    assert seqs == list(range(1, 121))
    both = await running.client.get(
        f"/v1/sessions/{session}/messages",
        params={"user_id": user, "cursor": params["cursor"], "before_seq": 10},
    )
    assert both.status_code == 422
    assert both.json()["errors"][0]["field"] == "before_seq"


JUNK_CURSORS = [
    "zz!",  # not base64
    "bm90IGpzb24",  # base64 of "not json"
    encode_cursor("x"),  # a list of the wrong shape for every list
    "e30",  # base64 of "{}": JSON, not a list
]


async def test_a_junk_cursor_is_a_422_invalid_cursor_on_every_list(
    running: Running, ids: Callable[[str], str]
) -> None:
    """One cursor rule for every list: session history answered a junk cursor with its
    first page (and a `next_cursor`), where /v1/memories answered 422 `invalid_cursor`."""
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("hello")], wait=False)
    made = await running.client.post(
        "/v1/memories", json={"user_id": user, "content": "a fact", "memory_type": "semantic"}
    )
    assert made.status_code == 201, made.text
    lists = [
        f"/v1/sessions/{session}/messages",
        "/v1/memories",
        f"/v1/memories/{made.json()['id']}/history",
        f"/v1/users/{user}/summaries",
        f"/v1/users/{user}/graph/entities",
        "/v1/admin/keys",
    ]
    for path in lists:
        for junk in [*JUNK_CURSORS, encode_cursor(-1), encode_cursor(2**63)]:
            resp = await running.client.get(path, params={"user_id": user, "cursor": junk})
            assert resp.status_code == 422, (path, junk, resp.text)
            problem = resp.json()
            assert problem["code"] == "invalid_cursor", (path, junk)
            assert problem["errors"][0]["field"] == "cursor"
        first = await running.client.get(path, params={"user_id": user, "cursor": ""})
        assert first.status_code == 200, (path, first.text)  # empty: the first page


async def test_past_created_at_is_kept_as_event_time(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(
        running,
        session,
        user,
        [turn("we adopted a puppy named Biscuit", id="p", created_at="2023-05-08T13:56:00+02:00")],
    )
    page = await running.client.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
    assert page.json()["items"][0]["created_at"] == "2023-05-08T11:56:00Z"
    found = await recall(running, user, "puppy Biscuit", top_k=1)
    assert found[0]["created_at"] == "2023-05-08T11:56:00Z"


async def test_a_session_belongs_to_one_user(running: Running, ids: Callable[[str], str]) -> None:
    """A session id is unique within its user (docs/security.md): another user naming it gets
    a session of their own, as for an id never used, and the owner's is untouched."""
    owner, other, session = ids("owner"), ids("other"), ids("session")
    put = await running.client.put(
        f"/v1/sessions/{session}", json={"user_id": owner, "system_prompt": "Be brief."}
    )
    assert put.status_code == 201
    again = await running.client.put(f"/v1/sessions/{session}", json={"user_id": owner})
    assert again.status_code == 200
    assert again.json()["system_prompt"] == "Be brief."

    hidden = await running.client.get(f"/v1/sessions/{session}", params={"user_id": other})
    assert hidden.status_code == 404
    assert hidden.json()["code"] == "session_not_found"
    theirs = await running.client.put(f"/v1/sessions/{session}", json={"user_id": other})
    assert theirs.status_code == 201
    assert theirs.json()["system_prompt"] is None
    post = await running.client.post(
        f"/v1/sessions/{session}/messages",
        json={"user_id": other, "messages": [turn("hi")]},
    )
    assert post.status_code == 202
    mine = await running.client.get(f"/v1/sessions/{session}", params={"user_id": owner})
    assert (mine.json()["last_seq"], mine.json()["system_prompt"]) == (0, "Be brief.")


async def test_an_update_changes_only_the_fields_it_names(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    url = f"/v1/sessions/{session}"
    made = await running.client.put(url, json={"user_id": user, "metadata": {"a": 1}})
    # Indexed first: the worker moving `indexed_seq` meanwhile would change what is read.
    await post_messages(running, session, user, [turn("hello")], wait=True)
    changed = await running.client.put(url, json={"user_id": user, "system_prompt": "Be kind."})
    assert changed.status_code == 200
    body = changed.json()
    assert (body["system_prompt"], body["metadata"], body["last_seq"]) == ("Be kind.", {"a": 1}, 1)
    assert body["updated_at"] > made.json()["updated_at"]
    cleared = await running.client.put(url, json={"user_id": user, "metadata": {}})
    assert (cleared.json()["system_prompt"], cleared.json()["metadata"]) == ("Be kind.", {})
    read = await running.client.get(url, params={"user_id": user})
    assert read.json() == cleared.json()


async def test_the_buffer_holds_the_window_and_refreshes_its_ttl(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn(f"m{i}") for i in range(3)], wait=False)
    redis = running.resources.buffer.redis
    key = _window_key(running.resources.settings.default_tenant, user, session)
    assert await redis.zcard(key) == 3
    ttl = await redis.ttl(key)
    assert 0 < ttl <= running.resources.settings.buffer_ttl_seconds


@pytest.mark.parametrize("mode_app", ["pg_edge", "embedded"], indirect=True)
async def test_a_5000_turn_import_is_fully_searchable(
    mode_app: Running, ids: Callable[[str], str]
) -> None:
    running = mode_app
    user, session = ids("user"), ids("session")
    total, batch = 5000, 1000
    for start in range(0, total, batch):
        messages = [
            turn(
                f"Day {i}: entry about topic{i} and the weather",
                role="user" if i % 2 == 0 else "assistant",
                id=f"t{i}",
            )
            for i in range(start, start + batch)
        ]
        body = await post_messages(
            running, session, user, messages, wait=start + batch == total, expect=None
        )
        assert body["accepted"] == batch
    state = (await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})).json()
    assert state["last_seq"] == total
    assert state["indexed_seq"] == total
    for i in (0, 1234, 2500, 4999):
        found = await recall(running, user, f"topic{i}", top_k=3)
        # Its neighbours index it as context, so it is among the first, not always first.
        assert f"t{i}" in [r["sources"][0]["message_id"] for r in found], i


async def test_concurrent_first_writes_to_a_new_session(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    posts = [
        running.client.post(
            f"/v1/sessions/{session}/messages",
            json={"user_id": user, "messages": [turn(f"parallel {i}", id=f"p{i % 4}")]},
        )
        for i in range(8)
    ]
    answers = await asyncio.gather(*posts)
    assert [a.status_code for a in answers] == [202] * 8
    assert sum(a.json()["accepted"] for a in answers) == 4  # ids repeat: p0..p3
    state = await running.client.get(f"/v1/sessions/{session}", params={"user_id": user})
    assert state.json()["last_seq"] == 4

    other = ids("racer")
    puts = [
        running.client.put(f"/v1/sessions/{other}", json={"user_id": f"{user}-{i}"})
        for i in range(4)
    ]
    codes = sorted(a.status_code for a in await asyncio.gather(*puts))
    assert codes == [201, 201, 201, 201]  # one session id, four users: a session each


async def test_a_message_to_a_known_session_writes_only_the_message(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Every message after a session's first is the common case: its session and user are
    read (and locked), not inserted again (one statement each on the write path). On SQLite
    the whole write is one hop to the writer's thread (app/stores/one_hop.py), past
    SQLAlchemy's engine."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("first")], wait=False)
    statements: list[str] = []

    def note(_c: object, _cur: object, statement: str, *_: object) -> None:
        statements.append(" ".join(statement.split()).upper())

    db = running.resources.db
    one_hop: list[object] = []
    write_in_one = db.write_in_one

    async def watched(work: Any) -> Any:
        one_hop.append(written := await write_in_one(work))
        return written

    event.listen(Engine, "before_cursor_execute", note)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(db, "write_in_one", watched)
            answer = await post_messages(running, session, user, [turn("second")], wait=False)
    finally:
        event.remove(Engine, "before_cursor_execute", note)
    assert answer["last_seq"] == 2
    # (Background work — the worker, leader leases — runs statements of its own meanwhile.)
    inserts = [s for s in statements if s.startswith("INSERT INTO MESSAGES")]
    if db.writes_in_one:
        assert inserts == []
        assert len(one_hop) == 1
        assert one_hop[0] is not None
    else:
        assert len(inserts) == 1, statements
        assert one_hop == []
    again = [s for s in statements if s.startswith(("INSERT INTO SESSIONS", "INSERT INTO USERS"))]
    assert again == []
    history = await running.client.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
    assert [m["content"] for m in history.json()["items"]] == ["first", "second"]


async def test_a_message_written_in_one_hop_reads_back_as_any_other(
    running: Running, ids: Callable[[str], str]
) -> None:
    """The one-hop write binds values as SQLAlchemy does (app/stores/one_hop.py): a row it
    writes and a row the general path writes hold the same text, so filters over them (a
    replay's `as_of`, the day of a summary) treat both alike. An event time on the second
    (no microseconds) is where a datetime bound as Python prints it would differ."""
    user, session = ids("user"), ids("session")
    fields: dict[str, Any] = {
        "created_at": "2024-05-01T10:00:00+02:00",
        "metadata": {"name": "Ana", "n": [1]},
    }
    first = turn("first", id="m1", **fields)
    second = turn("second", id="m2", **fields)
    await post_messages(running, session, user, [first], wait=False)  # a new session: general
    await post_messages(running, session, user, [second], wait=False)  # known: one hop
    history = await running.client.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
    got = history.json()["items"]
    assert [(m["id"], m["seq"]) for m in got] == [("m1", 1), ("m2", 2)]
    for m in got:
        assert m["created_at"].startswith("2024-05-01T08:00:00")
        assert m["metadata"] == fields["metadata"]
    stored = sa.select(Message.created_at, Message.received_at, Message.metadata_).where(
        Message.tenant_id == "default", Message.user_id == user, Message.session_id == session
    )
    async with running.resources.db.read() as tx:
        raw = (
            await tx.execute(
                sa.text(
                    "SELECT CAST(created_at AS TEXT), CAST(metadata AS TEXT) FROM messages"
                    " WHERE user_id = :u AND session_id = :s ORDER BY seq"
                ),
                {"u": user, "s": session},
            )
        ).all()
        rows = (await tx.execute(stored)).all()
    assert raw[0] == raw[1]  # the same stored text, whichever path wrote it
    assert rows[0].created_at == rows[1].created_at
