"""Reinforcement, feedback, Ebbinghaus forgetting, restore, purge and maintenance in the
running app (docs/forgetting.md). Months pass through the forgetting service's clock."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.jobs.registry import Registry
from app.jobs.runner import JobRunner
from app.jobs.scheduler import Scheduler
from app.services.forgetting import FORGET_SWEEP, ForgettingService
from app.settings import Settings
from app.stores import forgetting as forget_store
from app.stores.models import Job, Memory, MemoryEvent
from app.wiring import forgetting_config
from tests.conftest import Running, full_settings, post_messages, recall, settle, turn

DAY = timedelta(days=1)


def forgetting_at(running: Running, when: datetime) -> ForgettingService:
    """The app's forgetting service with its clock at `when`."""
    r = running.resources
    reindexer = running.state["container"].reindexer
    return ForgettingService(
        r.db, r.vectors, reindexer, forgetting_config(r.settings), clock=lambda: when
    )


async def stored_days_ago(running: Running, user: str, days: float) -> None:
    """Move the user's memories' last write back in time: the real clock of a job cannot
    be set, so their age is."""
    async with running.resources.db.transaction() as tx:
        await tx.execute(
            sa.update(Memory)
            .where(Memory.user_id == user)
            .values(updated_at=datetime.now(UTC) - days * DAY)
        )


async def remember(
    running: Running, user: str, content: str, importance: float | None = None, **extra: Any
) -> str:
    body: dict[str, Any] = {"user_id": user, "content": content, "memory_type": "semantic"}
    if importance is not None:
        body["importance"] = importance
    resp = await running.client.post("/v1/memories", json={**body, **extra})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def memory(running: Running, user: str, mid: str) -> dict[str, Any]:
    resp = await running.client.get(f"/v1/memories/{mid}", params={"user_id": user})
    body: dict[str, Any] = resp.json() if resp.status_code == 200 else {"status": resp.status_code}
    return body


async def history(running: Running, user: str, mid: str) -> list[dict[str, Any]]:
    resp = await running.client.get(f"/v1/memories/{mid}/history", params={"user_id": user})
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["items"]
    return items


async def test_recall_reinforces_only_what_matched_above_the_floor(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    dog = await remember(running, user, "Walks the dog at 7am every morning.")
    tax = await remember(running, user, "Filed the quarterly tax return with the accountant.")
    for _ in range(3):
        resp = await running.client.post(
            "/v1/recall",
            json={"user_id": user, "query": "when do I walk the dog", "min_relevance": 0},
        )
        assert resp.status_code == 200, resp.text
        # min_relevance 0 returns the unrelated memory too; it is not reinforced.
        assert {r["id"] for r in resp.json()["results"]} == {dog, tax}
    await settle(running)
    assert (await memory(running, user, dog))["access_count"] == 3
    assert (await memory(running, user, tax))["access_count"] == 0
    # Three recalls before one flush: one aggregate event.
    reinforced = [e for e in await history(running, user, dog) if e["event"] == "reinforced"]
    assert len(reinforced) == 1
    assert reinforced[0]["old"]["access_count"] == 0
    assert reinforced[0]["new"]["access_count"] == 3
    assert reinforced[0]["reason"].startswith("used 3×")


async def test_feedback_reinforces_what_was_used_and_ignores_unknown_ids(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    used = await remember(running, user, "Prefers window seats on long flights.")
    useless = await remember(running, user, "Mentioned the weather once.")
    other = await remember(running, ids("other"), "Someone else's memory.")
    unknown = str(uuid.uuid4())
    resp = await running.client.post(
        "/v1/memories/feedback",
        json={"user_id": user, "used": [used, used, other, unknown], "useless": [useless]},
    )
    assert resp.status_code == 202, resp.text
    assert resp.json()["accepted"] == 3
    assert sorted(resp.json()["ignored"]) == sorted([other, unknown])
    await settle(running)
    row = await memory(running, user, used)
    assert (row["access_count"], row["strength"]) == (2, 3.0)
    # Useless: no access, and strength never below 1.
    row = await memory(running, user, useless)
    assert (row["access_count"], row["strength"]) == (0, 1.0)
    events = [e for e in await history(running, user, useless) if e["event"] == "reinforced"]
    assert events
    assert "useless 1×" in events[0]["reason"]

    bad = await running.client.post(
        "/v1/memories/feedback", json={"user_id": user, "used": ["not-a-uuid"]}
    )
    assert bad.status_code == 422


async def test_sweep_forgets_unused_unimportant_memories_and_restore_brings_them_back(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    trivia = await remember(running, user, "The cafe had blue chairs.", importance=0.0)
    allergy = await remember(running, user, "I am allergic to penicillin.", importance=0.9)
    pinned = await remember(running, user, "Chit chat about chairs.", importance=0.0, pinned=True)
    now = datetime.now(UTC)

    # A week later retention is still high: nothing goes.
    report = await forgetting_at(running, now + 7 * DAY).sweep(tenant_id="default", user_id=user)
    assert (report.examined, report.forgotten) == (2, 0)

    later = now + 60 * DAY
    dry = await forgetting_at(running, later).sweep(tenant_id="default", user_id=user, dry_run=True)
    assert [(i["id"], i["action"]) for i in dry.items] == [(trivia, "forget")]
    assert dry.items[0]["retention"] < 0.05
    assert (await memory(running, user, trivia))["id"] == trivia  # a dry run changes nothing

    report = await forgetting_at(running, later).sweep(tenant_id="default", user_id=user)
    assert report.forgotten == 1
    assert (await memory(running, user, trivia)) == {"status": 404}
    assert (await memory(running, user, allergy))["id"] == allergy
    assert (await memory(running, user, pinned))["id"] == pinned
    results = await recall(running, user, "blue chairs at the cafe", min_relevance=0)
    assert trivia not in {r["id"] for r in results}  # out of the index
    forgotten = [e for e in await history(running, user, trivia) if e["event"] == "forgotten"]
    assert len(forgotten) == 1
    assert forgotten[0]["new"]["retention"] < 0.05
    assert forgotten[0]["new"]["importance"] < 0.3
    assert forgotten[0]["new"]["importance_threshold"] == 0.3

    # Restore within the grace period: live and found again.
    resp = await running.client.post(f"/v1/memories/{trivia}/restore", params={"user_id": user})
    assert resp.status_code == 200, resp.text
    assert resp.json()["last_accessed_at"] is not None
    results = await recall(running, user, "blue chairs at the cafe")
    assert results
    assert results[0]["id"] == trivia
    assert [e["event"] for e in await history(running, user, trivia)][-2:] == [
        "forgotten",
        "restored",
    ]
    again = await running.client.post(f"/v1/memories/{trivia}/restore", params={"user_id": user})
    assert (again.status_code, again.json()["code"]) == (409, "memory_not_forgotten")
    gone = await running.client.post(
        f"/v1/memories/{uuid.uuid4()}/restore", params={"user_id": user}
    )
    assert gone.status_code == 404

    # Forgotten again, then purged after the grace period: restore is a 410.
    await forgetting_at(running, later + 60 * DAY).sweep(tenant_id="default", user_id=user)
    report = await forgetting_at(running, later + 100 * DAY).sweep(
        tenant_id="default", user_id=user
    )
    assert report.purged == 1
    resp = await running.client.post(f"/v1/memories/{trivia}/restore", params={"user_id": user})
    assert (resp.status_code, resp.json()["code"]) == (410, "memory_purged")
    assert (await history(running, user, trivia))[-1]["event"] == "purged"


async def test_memories_reinforced_often_enough_are_pinned_and_never_forgotten(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    mid = await remember(running, user, "Likes jasmine tea.", importance=0.0)
    resp = await running.client.post(
        "/v1/memories/feedback", json={"user_id": user, "used": [mid] * 5}
    )
    assert resp.status_code == 202
    await settle(running)
    far = datetime.now(UTC) + 3650 * DAY
    report = await forgetting_at(running, far).sweep(tenant_id="default", user_id=user)
    assert (report.pinned, report.forgotten) == (1, 0)
    assert (await memory(running, user, mid))["pinned"] is True
    report = await forgetting_at(running, far).sweep(tenant_id="default", user_id=user)
    assert report.examined == 0  # pinned memories are not even read


async def test_promoted_filler_is_what_goes_first(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("s")
    when = datetime(2025, 3, 1, 9, tzinfo=UTC)
    msgs = [
        turn("ok", id="m1", created_at=when.isoformat()),
        turn("I moved to Lisbon in May, remember that.", id="m2", created_at=when.isoformat()),
    ]
    await post_messages(running, session, user, msgs)
    # Imported today: Δt runs from when Strata learned it, not from its event time.
    report = await forgetting_at(running, datetime.now(UTC)).sweep(
        tenant_id="default", user_id=user, dry_run=True
    )
    assert report.items == []
    report = await forgetting_at(running, datetime.now(UTC) + 60 * DAY).sweep(
        tenant_id="default", user_id=user, dry_run=True
    )
    assert [i["content"] for i in report.items] == ["user: ok"]  # filler goes, the fact stays


async def test_an_imported_history_is_not_forgotten_by_the_next_sweep(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Old event times (an import of last year's chats) do not make old memories: an
    unused memory's age counts from the day it was stored."""
    user, session = ids("user"), ids("s")
    year_ago = (datetime.now(UTC) - 365 * DAY).isoformat()
    await post_messages(running, session, user, [turn("lol", id="a", created_at=year_ago)])
    now = datetime.now(UTC)
    assert (
        await forgetting_at(running, now).sweep(tenant_id="default", user_id=user)
    ).forgotten == 0
    assert (
        await forgetting_at(running, now + 14 * DAY).sweep(tenant_id="default", user_id=user)
    ).forgotten == 0
    report = await forgetting_at(running, now + 30 * DAY).sweep(tenant_id="default", user_id=user)
    assert report.forgotten == 1
    assert report.items[0]["content"] == "user: lol"


async def test_maintenance_runs_each_task_as_a_job(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    when = datetime(2025, 1, 5, 9, tzinfo=UTC).isoformat()
    await post_messages(running, ids("s"), user, [turn("lol", id="a", created_at=when)])
    await stored_days_ago(running, user, 60)
    for task in ("forget", "reindex", "promote", "summarize"):
        resp = await running.client.post(
            "/v1/admin/maintenance", json={"task": task, "user_id": user, "dry_run": True}
        )
        assert resp.status_code == 202, resp.text
        job = resp.json()
        for _ in range(600):
            job = (await running.client.get(f"/v1/jobs/{job['id']}")).json()
            if job["state"] in ("succeeded", "failed"):
                break
            await asyncio.sleep(0.05)
        assert job["state"] == "succeeded", job
        assert job["result"]["task"] == task
        if task == "forget":
            assert [i["content"] for i in job["result"]["items"]] == ["user: lol"]
        if task == "reindex":
            assert job["result"]["memories"] == 1
    # a dry run forgot nothing; the real run does
    assert len(await recall(running, user, "lol", min_relevance=0)) == 1
    resp = await running.client.post(
        "/v1/admin/maintenance", json={"task": "forget", "user_id": user, "dry_run": False}
    )
    job = resp.json()
    for _ in range(600):
        job = (await running.client.get(f"/v1/jobs/{job['id']}")).json()
        if job["state"] in ("succeeded", "failed"):
            break
        await asyncio.sleep(0.05)
    assert (job["state"], job["result"]["forgotten"]) == ("succeeded", 1), job
    assert await recall(running, user, "lol", min_relevance=0) == []
    bad = await running.client.post("/v1/admin/maintenance", json={"task": "defrag"})
    assert bad.status_code == 422


async def test_forgetting_policy_defaults_and_patch(running: Running) -> None:
    got = await running.client.get("/v1/admin/forgetting")
    assert got.status_code == 200
    before = got.json()
    assert before["base_days"] == 7.0
    assert before["grace_days"] == 30.0
    patched = await running.client.patch(
        "/v1/admin/forgetting", json={"importance_threshold": 0.35}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json() == {**before, "importance_threshold": 0.35}
    assert (await running.client.get("/v1/admin/forgetting")).json()["importance_threshold"] == 0.35
    bad = await running.client.patch("/v1/admin/forgetting", json={"growth": 0.5})
    assert bad.status_code == 422
    # `null` hands the field back to the default (it was ignored once: the value stuck).
    restored = await running.client.patch(
        "/v1/admin/forgetting", json={"importance_threshold": None}
    )
    assert restored.status_code == 200, restored.text
    assert restored.json() == before
    async with running.resources.db.read() as tx:
        stored = await forget_store.get_policy(tx, "default") or {}
    assert "importance_threshold" not in stored


async def test_two_workers_run_the_sweep_once(
    pg_databases: Callable[[], Awaitable[str]],
    start_app: Callable[[Settings], Any],
    ids: Callable[[str], str],
) -> None:
    """Two workers' schedulers and runners, ticking at the same moment: one job, one
    sweep, each memory forgotten once."""
    settings = full_settings(await pg_databases(), worker_in_process=False, forgetting_enabled=True)
    async with start_app(settings) as running:
        user = ids("user")
        doomed = [await remember(running, user, f"note {n}", importance=0.0) for n in range(3)]
        later = datetime.now(UTC) + 90 * DAY
        r = running.resources
        workers = []
        for owner in ("w1", "w2"):
            registry = Registry([forgetting_at(running, later).sweep_job(every=DAY)])
            runner = JobRunner(
                r.db,
                owner,
                registry,
                lease_seconds=30,
                poll_seconds=0.05,
                retry_base_seconds=0.01,
                retry_max_seconds=0.05,
            )
            scheduler = Scheduler(
                r.db, owner, registry.schedules, lease_seconds=30, tick_seconds=1, max_attempts=3
            )
            workers.append((runner, scheduler))
        tick = datetime.now(UTC)
        led = await asyncio.gather(*(s.tick(tick) for _, s in workers))
        assert sorted(len(names) for names in led) == [0, 1]
        ran = await asyncio.gather(*(w.run_once() for w, _ in workers))
        assert sum(x is not None for x in ran) == 1
        assert all(x is None for x in await asyncio.gather(*(w.run_once() for w, _ in workers)))
        async with r.db.read() as tx:
            jobs = (await tx.execute(sa.select(Job).where(Job.kind == FORGET_SWEEP))).scalars()
            states = [j.state for j in jobs]
            events = (
                await tx.execute(
                    sa.select(MemoryEvent.memory_id).where(
                        MemoryEvent.user_id == user, MemoryEvent.event == "forgotten"
                    )
                )
            ).scalars()
            forgotten = sorted(str(m) for m in events)
        assert states == ["succeeded"]
        assert forgotten == sorted(doomed)


@pytest.mark.parametrize("mode_app", ["full"], indirect=True)
async def test_summaries_are_never_swept(mode_app: Running) -> None:
    # Summaries live in their own table: the sweep's scan reads memories only.
    service = forgetting_at(mode_app, datetime.now(UTC) + 3650 * DAY)
    report = await service.sweep(tenant_id="default", user_id="nobody-at-all", dry_run=True)
    assert (report.examined, report.items) == (0, [])


async def test_a_forgotten_turns_words_stop_finding_its_neighbours(
    running: Running, ids: Callable[[str], str]
) -> None:
    """As on a delete: the reply after a forgotten turn was indexed with that turn's words;
    the sweep rebuilds it without them, and a restore brings them back."""
    user, session = ids("user"), ids("s")
    when = datetime(2025, 3, 1, 9, tzinfo=UTC).isoformat()
    await post_messages(
        running,
        session,
        user,
        [
            turn("The Zanzibar ferry was late again.", id="t1", created_at=when),
            turn("Oh no, I hope you still made it home.", "assistant", id="t2", created_at=when),
        ],
    )
    before = await recall(running, user, "Zanzibar ferry", min_relevance=0)
    assert [r["content"] for r in before][:2] == [
        "user: The Zanzibar ferry was late again.",
        "assistant: Oh no, I hope you still made it home.",
    ]
    report = await forgetting_at(running, datetime.now(UTC) + 60 * DAY).sweep(
        tenant_id="default", user_id=user
    )
    assert [i["content"] for i in report.items] == ["user: The Zanzibar ferry was late again."]
    after = await recall(running, user, "Zanzibar ferry", min_relevance=0)
    assert [r for r in after if "Zanzibar" in r["content"]] == []
    reply = [r for r in after if r["content"].startswith("assistant: Oh no")]
    assert reply == [] or reply[0]["scores"]["semantic"] < 0.25, reply
    assert await recall(running, user, "Zanzibar ferry") == []

    restored = await running.client.post(
        f"/v1/memories/{before[0]['id']}/restore", params={"user_id": user}
    )
    assert restored.status_code == 200, restored.text
    again = await recall(running, user, "Zanzibar ferry", min_relevance=0)
    assert [r["content"] for r in again][:2] == [r["content"] for r in before][:2]


async def test_the_sweep_pages_through_every_memory_once_in_key_order(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Pages of 3 from after the last (tenant_id, id) key (a row-value comparison, on both
    databases): every live, unpinned memory once, none skipped at a page's edge."""
    from app.stores import forgetting as forget_store

    user = ids("user")
    mine = {await remember(running, user, f"Fact number {i} about the garden.") for i in range(7)}
    await remember(running, user, "Pinned: allergic to penicillin.", pinned=True)

    async def paged(tenant_id: str | None, user_id: str | None) -> list[tuple[str, uuid.UUID]]:
        keys: list[tuple[str, uuid.UUID]] = []
        async with running.resources.db.read() as tx:
            while True:
                rows = await forget_store.sweep_page(
                    tx, tenant_id=tenant_id, user_id=user_id, after=keys[-1] if keys else None,
                    limit=3,
                )  # fmt: skip
                if not rows:
                    return keys
                keys.extend((r.tenant_id, r.id) for r in rows)

    assert {str(mid) for _, mid in await paged("default", user)} == mine
    # Everyone's (other tests' memories too, and a worker may promote more meanwhile):
    # each once, and in the database's own order.
    everyone = await paged(None, None)
    async with running.resources.db.read() as tx:
        live = (
            await tx.execute(
                sa.select(Memory.tenant_id, Memory.id)
                .where(Memory.deleted_at.is_(None), Memory.pinned.is_(False))
                .order_by(Memory.tenant_id, Memory.id)
            )
        ).all()
    ordered = [(t, m) for t, m in live]
    assert len(everyone) == len(set(everyone))
    assert {str(m) for _, m in everyone} >= mine
    seen, known = set(everyone), set(ordered)
    assert [k for k in ordered if k in seen] == [k for k in everyone if k in known]


async def test_a_flush_of_more_memories_than_a_statement_takes_counts_each_once(
    running: Running, ids: Callable[[str], str]
) -> None:
    """A busy second's recalls reinforce thousands of memories in one flush, written a
    slice of `_LOOP_ROWS` rows a statement (app/stores/memories.py): every memory once,
    none lost or doubled at a slice's edge."""
    from app.stores.memories import _LOOP_ROWS

    user = ids("user")
    many = 2 * _LOOP_ROWS + 44
    mine = [
        await remember(running, user, f"Fact {i}: the garden's row {i} has tulips.")
        for i in range(many)
    ]
    services = running.state["services"]
    services.recall.reinforce_later(
        running.resources.settings.default_tenant, user, [uuid.UUID(m) for m in mine]
    )
    await settle(running)
    async with running.resources.db.read() as tx:
        counts = (
            (await tx.execute(sa.select(Memory.access_count).where(Memory.user_id == user)))
            .scalars()
            .all()
        )
        events = (
            await tx.execute(
                sa.select(sa.func.count())
                .select_from(MemoryEvent)
                .where(MemoryEvent.user_id == user, MemoryEvent.event == "reinforced")
            )
        ).scalar_one()
    assert sorted(counts) == [1] * many
    assert events == many
