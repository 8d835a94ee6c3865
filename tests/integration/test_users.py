"""A user's data as a whole, in both modes: the export holds everything, the erasure
removes everything (rows, buffer keys, index points, audit trail) with a receipt, refuses
writes while it runs, and is idempotent."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import sqlalchemy as sa

from app.stores import users as user_store
from app.stores.buffer import _scratchpad_key, _window_key
from app.stores.models import (
    Entity,
    Job,
    Memory,
    MemoryEvent,
    Message,
    Relation,
    Session,
    Summary,
    User,
)
from tests.conftest import Running, post_messages, recall, turn


async def export(running: Running, user: str) -> dict[str, Any]:
    resp = await running.client.get(f"/v1/users/{user}/export")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = orjson.loads(resp.content)
    return body


async def held(running: Running, user: str) -> dict[str, int]:
    """Rows of the user in every table, and their points in the index."""
    counts: dict[str, int] = {}
    async with running.resources.db.read() as tx:
        columns: list[tuple[str, Any]] = [
            ("users", User.id),
            ("sessions", Session.user_id),
            ("messages", Message.user_id),
            ("memories", Memory.user_id),
            ("memory_events", MemoryEvent.user_id),
            ("summaries", Summary.user_id),
        ]
        for name, column in columns:
            stmt = sa.select(sa.func.count()).where(column == user)
            counts[name] = int((await tx.execute(stmt)).scalar_one())
        jobs = sa.select(sa.func.count()).where(
            Job.payload["user_id"].as_string() == user, Job.kind != "erase_user"
        )
        counts["jobs"] = int((await tx.execute(jobs)).scalar_one())
    counts["index_points"] = await _points(running, user)
    return counts


async def _points(running: Running, user: str) -> int:
    """Points of the user that recall can reach (every one, with no relevance floor)."""
    results = await recall(running, user, "anything at all", top_k=200, min_relevance=0)
    return len(results)


async def seed(running: Running, user: str, session: str) -> None:
    await post_messages(
        running,
        session,
        user,
        [
            turn("I moved to Lisbon last May and the trams are lovely.", id="m1"),
            turn("How do you like Portugal?", role="assistant", id="m2"),
            turn("我最喜欢吃北京烤鸭。", id="m3"),
        ],
    )
    memory = await running.client.post(
        "/v1/memories",
        json={"user_id": user, "content": "Allergic to peanuts", "memory_type": "semantic"},
    )
    assert memory.status_code == 201, memory.text
    patch = await running.client.patch(
        f"/v1/memories/{memory.json()['id']}",
        json={"user_id": user, "content": "Allergic to peanuts and cashews"},
    )
    assert patch.status_code == 200, patch.text
    pad = await running.client.put(
        f"/v1/sessions/{session}/scratchpad", json={"user_id": user, "data": {"task": "visa"}}
    )
    assert pad.status_code == 200, pad.text


async def test_export_of_a_user_never_seen_is_404(running: Running) -> None:
    resp = await running.client.get(f"/v1/users/nobody-{uuid.uuid4().hex[:8]}/export")
    assert resp.status_code == 404
    assert resp.json()["code"] == "user_not_found"


async def test_export_holds_sessions_messages_buffer_memories_and_history(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session, other = ids("user"), ids("session"), ids("other")
    await seed(running, user, session)
    await post_messages(running, ids("other-session"), other, [turn("not theirs")])

    doc = await export(running, user)
    assert doc["format"] == 1
    assert doc["user_id"] == user
    assert doc["sections"] == [
        "user",
        "sessions",
        "buffer",
        "memories",
        "summaries",
        "graph",
        "jobs",
    ]
    assert list(doc)[4:] == doc["sections"]  # the keys, in the listed order
    assert doc["user"]["id"] == user
    [s] = doc["sessions"]
    assert s["id"] == session
    assert [(m["seq"], m["id"], m["role"]) for m in s["messages"]] == [
        (1, "m1", "user"),
        (2, "m2", "assistant"),
        (3, "m3", "user"),
    ]
    assert s["messages"][2]["content"] == "我最喜欢吃北京烤鸭。"
    [buf] = doc["buffer"]
    assert buf["session_id"] == session
    assert [m["id"] for m in buf["window"]] == ["m1", "m2", "m3"]
    assert buf["scratchpad"]["data"] == {"task": "visa"}
    contents = [m["content"] for m in doc["memories"]]
    assert "Allergic to peanuts and cashews" in contents
    assert any("Lisbon" in c for c in contents)
    written = next(m for m in doc["memories"] if m["content"].startswith("Allergic"))
    assert [e["event"] for e in written["history"]] == ["created", "updated"]
    assert written["history"][1]["old"] == {"content": "Allergic to peanuts"}
    assert "not theirs" not in orjson.dumps(doc).decode()


async def test_export_pages_through_a_long_log(running: Running, ids: Callable[[str], str]) -> None:
    user, session = ids("user"), ids("session")
    # More than one page of the export's reads (500 rows), over two requests.
    for start in (0, 600):
        await post_messages(
            running,
            session,
            user,
            [turn(f"note {i}") for i in range(start, start + 600)],
            wait=False,
        )
    doc = await export(running, user)
    [s] = doc["sessions"]
    assert [m["seq"] for m in s["messages"]] == list(range(1, 1201))
    assert s["messages"][-1]["content"] == "note 1199"


async def test_erasure_removes_everything_and_answers_a_receipt(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session, other, other_session = ids("user"), ids("session"), ids("other"), ids("os")
    await seed(running, user, session)
    await post_messages(running, other_session, other, [turn("I moved to Lisbon too.")])
    before = await held(running, user)
    assert before["messages"] == 3
    assert before["index_points"] >= 3
    memory_ids = [m["id"] for m in (await export(running, user))["memories"]]

    resp = await running.client.delete(f"/v1/users/{user}")
    assert resp.status_code == 200, resp.text
    receipt = resp.json()
    assert receipt["state"] == "succeeded"
    assert receipt["job_id"] is not None
    counts = receipt["counts"]
    assert counts["sessions"] == 1
    assert counts["messages"] == 3
    assert counts["memories"] == before["memories"] == len(memory_ids)
    assert counts["memory_events"] == before["memory_events"] >= 2
    assert counts["index_points"] >= before["index_points"]
    assert counts["buffer_keys"] == 2  # the window and the scratchpad

    assert await held(running, user) == dict.fromkeys(
        (
            "users",
            "sessions",
            "messages",
            "memories",
            "memory_events",
            "summaries",
            "jobs",
            "index_points",
        ),
        0,
    )
    redis = running.resources.buffer.redis
    assert (
        await redis.exists(
            _window_key("default", user, session), _scratchpad_key("default", user, session)
        )
        == 0
    )
    # Afterwards: recall is an empty 200, export a 404, the history of a memory a 404.
    assert await recall(running, user, "Where did I move?", min_relevance=0) == []
    gone = await running.client.get(f"/v1/users/{user}/export")
    assert (gone.status_code, gone.json()["code"]) == (404, "user_not_found")
    history = await running.client.get(
        f"/v1/memories/{memory_ids[0]}/history", params={"user_id": user}
    )
    assert history.status_code == 404
    old = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 2000}
    )
    assert old.status_code == 404
    # The other user is untouched.
    assert (await held(running, other))["messages"] == 1
    assert await recall(running, other, "Lisbon", min_relevance=0)

    # The receipt stays, with counts and ids only.
    job = await running.client.get(f"/v1/jobs/{receipt['job_id']}")
    assert job.json()["state"] == "succeeded"
    assert job.json()["result"]["counts"] == counts
    assert "Lisbon" not in job.text
    assert "peanuts" not in job.text

    # Idempotent: again, a 200 with nothing to count.
    again = await running.client.delete(f"/v1/users/{user}")
    assert again.status_code == 200
    assert again.json()["job_id"] is None
    assert set(again.json()["counts"].values()) == {0}

    # The user id may be used again, from nothing: context shows none of the old memories.
    fresh = ids("fresh")
    await post_messages(running, fresh, user, [turn("Where did I say I moved to?")])
    ctx = await running.client.post(
        f"/v1/sessions/{fresh}/context", json={"user_id": user, "token_budget": 2000}
    )
    assert ctx.status_code == 200, ctx.text
    assert "Lisbon" not in ctx.text
    assert "peanuts" not in ctx.text


async def test_while_erasing_writes_are_refused_and_export_is_404(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("hello")])
    job_id = str(uuid.uuid4())  # an erasure marked but not run: the window a job takes
    async with running.resources.db.transaction() as tx:
        await user_store.set_erasure(tx, "default", user, {"job_id": job_id, "counts": {}})

    for resp in (
        await running.client.post(
            f"/v1/sessions/{session}/messages",
            json={"user_id": user, "messages": [turn("more")]},
        ),
        await running.client.post(
            f"/v1/sessions/{ids('new')}/messages",
            json={"user_id": user, "messages": [turn("more")]},
        ),
        await running.client.put(f"/v1/sessions/{ids('put')}", json={"user_id": user}),
        await running.client.post(
            "/v1/memories",
            json={"user_id": user, "content": "x", "memory_type": "semantic"},
        ),
        await running.client.post(
            f"/v1/users/{user}/graph/triples",
            json={"triples": [{"subject": "user", "predicate": "lives_in", "object": "Rome"}]},
        ),
        await running.client.patch(f"/v1/users/{user}/profile", json={"city": "Rome"}),
        await running.client.post(
            "/v1/summarize", json={"user_id": user, "level": "daily", "period_start": "2026-01-05"}
        ),
    ):
        assert resp.status_code == 409, resp.text
        assert resp.json()["code"] == "user_erasure_in_progress"
        assert job_id in resp.json()["detail"]
    assert (await running.client.get(f"/v1/users/{user}/export")).status_code == 404
    counts = await held(running, user)
    assert (counts["sessions"], counts["messages"], counts["memories"]) == (1, 1, 1)
    async with running.resources.db.read() as tx:
        stmt = sa.select(sa.func.count()).where(Entity.user_id == user)
        assert (await tx.execute(stmt)).scalar_one() == 0
        assert await user_store.profile(tx, "default", user) in (None, {})


async def test_wait_false_answers_202_with_the_job(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("hello there")])
    resp = await running.client.delete(f"/v1/users/{user}", params={"wait": "false"})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["state"] in ("queued", "running")
    # Asked again while it runs: the same job.
    again = await running.client.delete(f"/v1/users/{user}", params={"wait": "false"})
    assert again.json()["job_id"] in (body["job_id"], None)  # None: it finished meanwhile
    for _ in range(600):
        job = (await running.client.get(f"/v1/jobs/{body['job_id']}")).json()
        if job["state"] == "succeeded":
            break
        await asyncio.sleep(0.05)
    assert job["state"] == "succeeded", job
    assert job["result"]["counts"]["messages"] == 1
    assert (await held(running, user))["messages"] == 0


async def test_ingest_racing_an_erasure_leaves_no_rows_behind(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    for i in range(5):
        await post_messages(running, ids(f"s{i}"), user, [turn(f"old note {i}")], wait=False)
    stored: list[str] = []
    refused = 0
    erased = asyncio.Event()

    async def writer(n: int) -> None:
        nonlocal refused
        i = 0
        while not erased.is_set():
            content = f"racing note {n}.{i}"
            resp = await running.client.post(
                f"/v1/sessions/{ids(f'w{n}')}/messages",
                json={"user_id": user, "messages": [turn(content)]},
            )
            if resp.status_code == 202:
                stored.append(content)
            else:
                assert resp.status_code == 409, resp.text
                refused += 1
            i += 1
            await asyncio.sleep(0)

    writers = [asyncio.create_task(writer(n)) for n in range(3)]
    await asyncio.sleep(0.05)
    resp = await running.client.delete(f"/v1/users/{user}")
    erased.set()
    await asyncio.gather(*writers)
    assert resp.status_code == 200, resp.text
    assert resp.json()["counts"]["messages"] >= 5
    # The writers ran on through the erasure: some were refused (the mark is set before
    # the job can start), and some stored before it.
    assert refused > 0
    assert stored

    # What is left was written after the erasure ended, for a user seen anew: never a row
    # of a user that is gone, and never a refused message.
    counts = await held(running, user)
    async with running.resources.db.read() as tx:
        row = await user_store.get(tx, "default", user)
        left = (
            (await tx.execute(sa.select(Message.content).where(Message.user_id == user)))
            .scalars()
            .all()
        )
    if row is None:
        assert set(counts.values()) == {0}, counts
    else:
        assert row.erasure is None
        assert set(left) <= set(stored)
        assert not any(c.startswith("old note") for c in left)
    # Erased again with no writer about: nothing at all.
    assert (await running.client.delete(f"/v1/users/{user}")).status_code == 200
    await asyncio.sleep(0)
    assert (await held(running, user))["messages"] == 0


async def test_summaries_and_jobs_are_exported_then_erased(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    day = datetime.now(UTC).date() - timedelta(days=2)
    await post_messages(
        running,
        session,
        user,
        [turn("I planted tomatoes in the garden.", created_at=f"{day.isoformat()}T12:00:00Z")],
    )
    summaries = running.state["services"].summaries
    assert (await summaries.summarize("default", user, "daily", day)).summary is not None
    job_id, _, _ = await summaries.enqueue("default", user, "weekly", day)  # a job about them

    doc = await export(running, user)
    assert "daily" in [s["level"] for s in doc["summaries"]]
    assert str(job_id) in [j["id"] for j in doc["jobs"]]

    resp = await running.client.delete(f"/v1/users/{user}")
    assert resp.status_code == 200, resp.text
    counts = resp.json()["counts"]
    assert counts["summaries"] >= 1
    assert counts["jobs"] >= 1
    assert set((await held(running, user)).values()) == {0}


async def test_no_summary_is_written_for_a_user_being_erased(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    day = datetime.now(UTC).date() - timedelta(days=2)
    await post_messages(
        running,
        session,
        user,
        [turn("I repaired the fence.", created_at=f"{day.isoformat()}T09:00:00Z")],
    )
    async with running.resources.db.transaction() as tx:
        await user_store.set_erasure(tx, "default", user, {"job_id": str(uuid.uuid4())})
    outcome = await running.state["services"].summaries.summarize("default", user, "daily", day)
    assert outcome.summary is None
    counts = await held(running, user)
    assert counts["summaries"] == 0
    assert counts["index_points"] == 1  # the message's memory, and no summary's point


async def test_the_graph_and_profile_are_exported_then_erased(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Features that came after export and erasure hold user data too: the profile rides on
    the user row, the knowledge graph has tables of its own."""
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("My sister Anna lives in Berlin.")])
    triples = [
        {"subject": "user", "predicate": "sister", "object": "Anna"},
        {"subject": "Anna", "predicate": "lives_in", "object": "Berlin"},
    ]
    added = await running.client.post(f"/v1/users/{user}/graph/triples", json={"triples": triples})
    assert added.status_code == 201, added.text
    profile = await running.client.patch(f"/v1/users/{user}/profile", json={"city": "Lisbon"})
    assert profile.status_code == 200, profile.text

    document = await export(running, user)
    assert {e["name"] for e in document["graph"]["entities"]} >= {"Anna", "Berlin"}
    assert {r["predicate"] for r in document["graph"]["relations"]} == {"sister", "lives_in"}
    assert "Lisbon" in orjson.dumps(document["user"]).decode()

    resp = await running.client.delete(f"/v1/users/{user}")
    assert resp.status_code == 200, resp.text
    counts = resp.json()["counts"]
    assert counts["relations"] == 2
    assert counts["entities"] >= 2
    async with running.resources.db.read() as tx:
        for model in (Entity, Relation):
            stmt = sa.select(sa.func.count()).where(model.user_id == user)
            assert (await tx.execute(stmt)).scalar_one() == 0, model.__tablename__
    gone = await running.client.get(f"/v1/users/{user}/graph/entities", params={"q": "Anna"})
    assert gone.status_code in (200, 404)
    assert "Anna" not in gone.text


async def test_a_user_known_only_by_their_graph_is_exported_and_erased(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Triples are the first thing written for this user: the user must exist for export
    and erasure to find them (an erasure of a user with no row finds nothing to do)."""
    user = ids("user")
    triples = [{"subject": "user", "predicate": "works_at", "object": "Acme"}]
    added = await running.client.post(f"/v1/users/{user}/graph/triples", json={"triples": triples})
    assert added.status_code == 201, added.text

    document = await export(running, user)
    assert {e["name"] for e in document["graph"]["entities"]} >= {"Acme"}

    resp = await running.client.delete(f"/v1/users/{user}")
    assert resp.status_code == 200, resp.text
    assert resp.json()["counts"]["relations"] == 1
    async with running.resources.db.read() as tx:
        for model in (Entity, Relation):
            stmt = sa.select(sa.func.count()).where(model.user_id == user)
            assert (await tx.execute(stmt)).scalar_one() == 0, model.__tablename__


async def test_a_summary_asked_for_a_user_never_seen_is_their_data(
    running: Running, ids: Callable[[str], str]
) -> None:
    """`POST /v1/summarize` queues a job that names the user: the user's row is made with
    it, so the export shows the job and the erasure removes it."""
    user = ids("user")
    asked = await running.client.post(
        "/v1/summarize", json={"user_id": user, "level": "daily", "period_start": "2026-01-05"}
    )
    assert asked.status_code in (200, 202), asked.text
    document = await export(running, user)
    assert document["jobs"], document
    resp = await running.client.delete(f"/v1/users/{user}")
    assert resp.status_code == 200, resp.text
    assert (await held(running, user))["jobs"] == 0
