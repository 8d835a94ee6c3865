"""The promotion worker: watermark, lease, and idempotence under concurrency (PostgreSQL)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from app.providers.embeddings import OpenAIEmbedder
from app.schemas.ingest import IngestRequest
from app.services.promotion import Promoter, PromoterParts
from app.stores import sessions as session_store
from app.stores.models import Memory, MemoryEvent, Session
from app.wiring import build_promoter, promotion_config
from tests.conftest import Running, full_settings, post_messages, recall, turn


@pytest.fixture
async def idle_app(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[..., Any]
) -> AsyncIterator[Running]:
    """PostgreSQL + Redis with no worker running: the test drives promotion itself. The
    memories counted are the turns' alone: no profile facts extracted beside them."""
    settings = full_settings(
        await pg_databases(),
        worker_in_process=False,
        worker_batch_messages=7,
        offline_extraction=False,
    )
    async with start_app(settings) as running:
        yield running


async def counts(running: Running, session: str) -> tuple[int, int, int]:
    async with running.resources.db.transaction() as tx:
        memories = await tx.scalar(
            sa.select(sa.func.count()).select_from(Memory).where(Memory.session_id == session)
        )
        created = await tx.scalar(
            sa.select(sa.func.count())
            .select_from(MemoryEvent)
            .where(MemoryEvent.event == "created")
        )
        indexed = await tx.scalar(sa.select(Session.indexed_seq).where(Session.id == session))
    return int(memories or 0), int(created or 0), int(indexed or 0)


async def test_two_workers_on_one_backlog_write_nothing_twice(idle_app: Running) -> None:
    user, session = "u-workers", "s-workers"
    messages = [turn(f"distinct fact {i} about item{i}", id=f"m{i}") for i in range(40)]
    await post_messages(idle_app, session, user, messages, wait=False)

    a = build_promoter(idle_app.resources, "worker-a")
    b = build_promoter(idle_app.resources, "worker-b")
    for _ in range(20):
        done = await asyncio.gather(a.run_once(), b.run_once())
        if sum(done) == 0:
            break
    assert await counts(idle_app, session) == (40, 40, 40)

    # A replay from the start (say, a watermark restored from a backup) changes nothing.
    async with idle_app.resources.db.transaction() as tx:
        await tx.execute(sa.update(Session).where(Session.id == session).values(indexed_seq=0))
    while await a.run_once():
        pass
    assert await counts(idle_app, session) == (40, 40, 40)


async def test_a_crashed_workers_lease_expires_and_another_takes_over(idle_app: Running) -> None:
    user, session = "u-lease", "s-lease"
    await post_messages(idle_app, session, user, [turn(f"note {i}") for i in range(5)], wait=False)
    now = datetime.now(UTC)
    async with idle_app.resources.db.transaction() as tx:
        backlog = await session_store.claim_backlog(
            tx, owner="crashed", now=now, lease_until=now + timedelta(minutes=5), limit=10
        )
    assert [c.session_id for c in backlog.claims] == [session]
    assert not backlog.more

    other = build_promoter(idle_app.resources, "survivor")
    assert await other.run_once() == 0  # the lease still holds
    async with idle_app.resources.db.transaction() as tx:
        await tx.execute(
            sa.update(Session)
            .where(Session.id == session)
            .values(lease_expires_at=now - timedelta(seconds=1))
        )
    assert await other.run_once() == 5
    assert (await counts(idle_app, session))[0] == 5


async def test_a_worker_that_lost_its_lease_commits_nothing(idle_app: Running) -> None:
    user, session = "u-lost", "s-lost"
    await post_messages(idle_app, session, user, [turn(f"item {i}") for i in range(3)], wait=False)
    now = datetime.now(UTC)
    async with idle_app.resources.db.transaction() as tx:
        [claim] = (
            await session_store.claim_backlog(
                tx, owner="slow", now=now, lease_until=now + timedelta(minutes=5), limit=10
            )
        ).claims
        # Another worker takes the session over meanwhile.
        await tx.execute(sa.update(Session).where(Session.id == session).values(lease_owner="fast"))
    slow = build_promoter(idle_app.resources, "slow")
    assert await slow.promote(claim) == 0
    assert await counts(idle_app, session) == (0, 0, 0)


async def test_a_session_deleted_mid_promotion_leaves_nothing_searchable(
    idle_app: Running,
) -> None:
    user, session = "u-erase", "s-erase"
    await post_messages(idle_app, session, user, [turn("my hint is purple elephant")], wait=False)
    vectors = idle_app.resources.vectors
    real_upsert = vectors.upsert

    async def upsert_then_delete_session(points: Any) -> None:
        # Fault injection: the caller erases the session between the index write and the
        # commit of the rows (the real stores do all the work).
        await real_upsert(points)
        resp = await idle_app.client.delete(f"/v1/sessions/{session}", params={"user_id": user})
        assert resp.status_code == 200

    vectors.upsert = upsert_then_delete_session  # type: ignore[method-assign]
    try:
        assert await build_promoter(idle_app.resources, "w").run_once() == 0
    finally:
        vectors.upsert = real_upsert  # type: ignore[method-assign]
    found = await idle_app.client.post(
        "/v1/recall", json={"user_id": user, "query": "purple elephant", "reinforce": False}
    )
    assert found.json()["results"] == []


async def test_a_reused_session_id_is_indexed_afresh(idle_app: Running) -> None:
    session = "s-reused"
    await post_messages(
        idle_app, session, "first", [turn("durian is smelly"), turn("ok")], wait=False
    )
    promoter = build_promoter(idle_app.resources, "w")
    await promoter.run_once()
    listed = await idle_app.client.get("/v1/memories", params={"user_id": "first"})
    mid = listed.json()["items"][0]["id"]
    await idle_app.client.delete(f"/v1/memories/{mid}", params={"user_id": "first"})
    await idle_app.client.delete(f"/v1/sessions/{session}", params={"user_id": "first"})

    await post_messages(
        idle_app, session, "second", [turn("durian again"), turn("fine")], wait=False
    )
    await promoter.run_once()
    found = await idle_app.client.post(
        "/v1/recall", json={"user_id": "second", "query": "durian", "reinforce": False}
    )
    assert [r["content"] for r in found.json()["results"]][:1] == ["user: durian again"]
    assert (await counts(idle_app, session))[0] == 2
    # The first user's erased session left nothing behind, not even soft-deleted rows.
    async with idle_app.resources.db.read() as tx:
        leftovers = await tx.scalar(
            sa.select(sa.func.count()).select_from(Memory).where(Memory.user_id == "first")
        )
    assert leftovers == 0


async def test_a_failing_session_backs_off_while_others_proceed(idle_app: Running) -> None:
    # Two users: a pass takes one session per user (the other user's turn comes first).
    bad, good, user, other = "s-backoff-bad", "s-backoff-good", "u-backoff", "u-backoff-2"
    asked: list[str] = []
    provider_down_for = ["POISON"]

    def provider(request: httpx.Request) -> httpx.Response:
        texts: list[str] = json.loads(request.content)["input"]
        asked.extend(texts)
        if any(word in t for t in texts for word in provider_down_for):
            return httpx.Response(503)
        return httpx.Response(
            200, json={"data": [{"index": i, "embedding": [1.0] * 512} for i in range(len(texts))]}
        )

    # The embedding provider (outbound HTTP) fails on one session's text only.
    embedder = OpenAIEmbedder(
        httpx.AsyncClient(transport=httpx.MockTransport(provider), base_url="http://provider"),
        model="stub",
        dim=512,
        retries=0,
    )
    settings = idle_app.resources.settings.model_copy(
        update={"promote_retry_base_seconds": 2.0, "promote_retry_max_seconds": 60}
    )
    r = idle_app.resources
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(settings), owner="w"
    )

    async def session(session_id: str) -> Session:
        async with idle_app.resources.db.read() as tx:
            # By id alone: each of these session ids has one user here.
            row = (
                await tx.execute(
                    sa.select(Session).where(
                        Session.tenant_id == "default", Session.id == session_id
                    )
                )
            ).scalar_one_or_none()
        assert row is not None
        return row

    await post_messages(idle_app, bad, user, [turn("POISON pill")], wait=False)
    await post_messages(idle_app, good, other, [turn("fine 1")], wait=False)
    assert await promoter.run_once() == 1
    failed = await session(bad)
    assert failed.promote_failures == 1
    assert failed.promote_retry_at is not None
    assert failed.indexed_seq == 0
    assert (await session(good)).indexed_seq == 1

    # Before its retry time the failing session is skipped; the other goes on.
    asked.clear()
    await post_messages(idle_app, good, other, [turn("fine 2")], wait=False)
    assert await promoter.run_once() == 1
    assert (await session(good)).indexed_seq == 2
    assert not any("POISON" in t for t in asked)

    # After it, retried: a second failure doubles the wait.
    await asyncio.sleep((failed.promote_retry_at - datetime.now(UTC)).total_seconds() + 0.05)
    assert await promoter.run_once() == 0
    again = await session(bad)
    assert again.promote_failures == 2
    assert again.promote_retry_at is not None
    assert again.promote_retry_at - failed.promote_retry_at >= timedelta(seconds=2)

    # The provider recovers: the next retry succeeds and the backoff is reset.
    provider_down_for.clear()
    await asyncio.sleep((again.promote_retry_at - datetime.now(UTC)).total_seconds() + 0.05)
    assert await promoter.run_once() == 1
    healed = await session(bad)
    assert (healed.indexed_seq, healed.promote_failures, healed.promote_retry_at) == (1, 0, None)
    # The pass's commit gave the lease back with the watermark.
    assert (healed.lease_owner, healed.lease_expires_at) == (None, None)
    await embedder.close()


async def test_a_pass_embeds_its_sessions_in_one_call(idle_app: Running) -> None:
    """Three users' sessions in one pass: one call to the model for all their lines, each
    session's memories written under its own watermark."""
    calls: list[list[str]] = []

    def provider(request: httpx.Request) -> httpx.Response:
        texts: list[str] = json.loads(request.content)["input"]
        calls.append(texts)
        return httpx.Response(
            200, json={"data": [{"index": i, "embedding": [1.0] * 512} for i in range(len(texts))]}
        )

    embedder = OpenAIEmbedder(
        httpx.AsyncClient(transport=httpx.MockTransport(provider), base_url="http://provider"),
        model="stub",
        dim=512,
        retries=0,
    )
    r = idle_app.resources
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(r.settings), owner="w"
    )
    for n in range(3):
        await post_messages(
            idle_app,
            f"s-one-call-{n}",
            f"u-one-call-{n}",
            [turn(f"pass {n} a"), turn(f"pass {n} b")],
            wait=False,
        )
    assert await promoter.run_once() == 6
    assert len(calls) == 1
    assert sorted(calls[0]) == sorted(f"user: pass {n} {x}" for n in range(3) for x in "ab")
    for n in range(3):
        assert (await counts(idle_app, f"s-one-call-{n}"))[0] == 2


async def test_two_tenants_sessions_of_one_name_in_one_pass_stay_apart(
    idle_app: Running,
) -> None:
    """Sessions are (tenant, id): a pass holding both tenants' "chat" promotes each from its
    own log, under its own tenant."""
    r = idle_app.resources
    ingest = idle_app.state["services"].ingest
    name = "chat-shared-name"
    await post_messages(idle_app, name, "u-tenant-a", [turn("alpha only")], wait=False)
    await ingest.add_messages(
        "tenant-b",
        name,
        IngestRequest.model_validate(
            {"user_id": "u-tenant-b", "messages": [turn(f"beta {n}") for n in range(3)]}
        ),
    )
    promoter = build_promoter(r, "w")
    assert await promoter.run_once() == 4
    async with r.db.read() as tx:
        rows = (
            await tx.execute(
                sa.select(Memory.tenant_id, Memory.user_id, Memory.content)
                .where(Memory.session_id == name)
                .order_by(Memory.tenant_id, Memory.content)
            )
        ).all()
        marks = dict(
            (
                await tx.execute(
                    sa.select(Session.tenant_id, Session.indexed_seq).where(Session.id == name)
                )
            ).all()
        )
    assert [tuple(x) for x in rows] == [
        ("default", "u-tenant-a", "user: alpha only"),
        *(("tenant-b", "u-tenant-b", f"user: beta {n}") for n in range(3)),
    ]
    assert marks == {"default": 1, "tenant-b": 3}


async def test_a_cancelled_pass_gives_its_leases_back(idle_app: Running) -> None:
    """A worker stopping mid-pass (its task cancelled while the model runs) releases every
    session it claimed, so another worker need not wait out the lease."""
    embedding = asyncio.Event()

    async def provider(request: httpx.Request) -> httpx.Response:
        embedding.set()
        await asyncio.sleep(60)
        return httpx.Response(503)

    embedder = OpenAIEmbedder(
        httpx.AsyncClient(transport=httpx.MockTransport(provider), base_url="http://provider"),
        model="stub",
        dim=512,
        retries=0,
    )
    r = idle_app.resources
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(r.settings), owner="stopping"
    )
    for n in range(2):
        await post_messages(idle_app, f"s-cancel-{n}", f"u-cancel-{n}", [turn("hello")], wait=False)
    task = asyncio.create_task(promoter.run_once())
    await asyncio.wait_for(embedding.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with r.db.read() as tx:
        owners = (
            (
                await tx.execute(
                    sa.select(Session.lease_owner).where(
                        Session.id.in_(["s-cancel-0", "s-cancel-1"])
                    )
                )
            )
            .scalars()
            .all()
        )
    assert owners == [None, None]


async def _sparse_hits(running: Running, user: str, query: str) -> list[str]:
    """The memory ids the index's term list finds for `query`."""
    from app.core import terms
    from app.stores.vectors import VectorQuery

    [q] = await running.resources.embedder.embed([query])
    tenant = running.resources.settings.default_tenant
    found = await running.resources.vectors.candidates(
        VectorQuery(tenant, user, q, terms.query_vector(query), 20)
    )
    return [str(h.id) for h in found.sparse]


async def _only_memory(running: Running, user: str) -> str:
    resp = await running.client.get("/v1/memories", params={"user_id": user})
    [item] = resp.json()["items"]
    return str(item["id"])


async def test_a_deleted_turn_is_no_context_for_the_turns_promoted_after_it(
    idle_app: Running,
) -> None:
    user, session = "u-ctx-gone", "s-ctx-gone"
    promoter = build_promoter(idle_app.resources, "w")
    await post_messages(
        idle_app, session, user, [turn("I adopted a parrot named Kiwi")], wait=False
    )
    assert await promoter.run_once() == 1
    parrot = await _only_memory(idle_app, user)
    assert await _sparse_hits(idle_app, user, "kiwi") == [parrot]
    resp = await idle_app.client.delete(f"/v1/memories/{parrot}", params={"user_id": user})
    assert resp.is_success, resp.text

    reply = turn("What a lovely bird!", role="assistant")
    await post_messages(idle_app, session, user, [reply], wait=False)
    assert await promoter.run_once() == 1
    assert await _sparse_hits(idle_app, user, "kiwi") == []
    assert await _sparse_hits(idle_app, user, "lovely bird") == [await _only_memory(idle_app, user)]


async def _a_turn_then_its_reply(
    idle_app: Running, user: str, session: str
) -> tuple[Promoter, str]:
    """A promoted turn (its memory's id returned) and its reply, not promoted yet: the next
    pass re-points that turn as the turn before its slice."""
    promoter = build_promoter(idle_app.resources, "w")
    await post_messages(idle_app, session, user, [turn("My gym locker code is 4711")], wait=False)
    assert await promoter.run_once() == 1
    locker = await _only_memory(idle_app, user)
    await post_messages(idle_app, session, user, [turn("Noted.", role="assistant")], wait=False)
    return promoter, locker


async def test_the_turn_before_deleted_mid_promotion_stays_out_of_the_index(
    idle_app: Running,
) -> None:
    """The turn before a slice is re-pointed with the slice (its next turn's terms); if
    its memory is deleted between that write and the commit, its point must not come back."""
    user, session = "u-before-gone", "s-before-gone"
    promoter, locker = await _a_turn_then_its_reply(idle_app, user, session)

    vectors = idle_app.resources.vectors
    real_upsert = vectors.upsert

    async def delete_then_upsert(points: Any) -> None:
        # Fault injection: the caller deletes that memory after the slice was read, just
        # before its points (the re-pointed one among them) are written.
        if any(str(p.id) == locker for p in points):
            resp = await idle_app.client.delete(f"/v1/memories/{locker}", params={"user_id": user})
            assert resp.is_success, resp.text
        await real_upsert(points)

    vectors.upsert = delete_then_upsert  # type: ignore[method-assign]
    try:
        assert await promoter.run_once() == 1
    finally:
        vectors.upsert = real_upsert  # type: ignore[method-assign]
    assert locker not in await _sparse_hits(idle_app, user, "gym locker code 4711")
    found = await recall(idle_app, user, "gym locker code", min_relevance=0)
    assert locker not in [r["id"] for r in found]


async def test_the_turn_before_deleted_before_a_lost_lease_stays_out_of_the_index(
    idle_app: Running,
) -> None:
    """As above, and the batch then rolls back (another worker took the lease): the point
    written for the deleted memory goes all the same."""
    user, session = "u-before-lost", "s-before-lost"
    promoter = build_promoter(idle_app.resources, "w")
    await post_messages(idle_app, session, user, [turn("My bike lock code is 9031")], wait=False)
    assert await promoter.run_once() == 1
    lock = await _only_memory(idle_app, user)
    await post_messages(idle_app, session, user, [turn("Got it.", role="assistant")], wait=False)

    vectors = idle_app.resources.vectors
    real_upsert = vectors.upsert

    async def delete_steal_upsert(points: Any) -> None:
        if any(str(p.id) == lock for p in points):
            resp = await idle_app.client.delete(f"/v1/memories/{lock}", params={"user_id": user})
            assert resp.is_success, resp.text
            async with idle_app.resources.db.transaction() as tx:
                tenant = idle_app.resources.settings.default_tenant
                await tx.execute(
                    sa.update(Session)
                    .where(Session.tenant_id == tenant, Session.id == session)
                    .values(lease_owner="other")
                )
        await real_upsert(points)

    vectors.upsert = delete_steal_upsert  # type: ignore[method-assign]
    try:
        assert await promoter.run_once() == 0
    finally:
        vectors.upsert = real_upsert  # type: ignore[method-assign]
    assert lock not in await _sparse_hits(idle_app, user, "bike lock code 9031")


async def test_a_context_turn_deleted_mid_promotion_leaves_the_turn_before_without_it(
    idle_app: Running,
) -> None:
    """The turn before the slice is written with its context's words as they were read; a
    context turn deleted meanwhile has had that turn rebuilt without its words, which the
    slice's write must not put back."""
    user, session = "u-ctx-mid", "s-ctx-mid"
    promoter = build_promoter(idle_app.resources, "w")
    first = [turn("I adopted a parrot named Kiwi"), turn("What a lovely bird!", role="assistant")]
    await post_messages(idle_app, session, user, first, wait=False)
    assert await promoter.run_once() == 2
    resp = await idle_app.client.get("/v1/memories", params={"user_id": user})
    ids = {item["content"]: str(item["id"]) for item in resp.json()["items"]}
    parrot, bird = ids["user: I adopted a parrot named Kiwi"], ids["assistant: What a lovely bird!"]
    assert set(await _sparse_hits(idle_app, user, "kiwi")) == {parrot, bird}
    await post_messages(idle_app, session, user, [turn("Thanks!")], wait=False)

    vectors = idle_app.resources.vectors
    real_upsert = vectors.upsert

    deleted: list[str] = []

    async def delete_then_upsert(points: Any) -> None:
        # Once: the delete's own rebuild of the bird turn comes through here too.
        if not deleted and any(str(p.id) == bird for p in points):
            deleted.append(parrot)
            resp = await idle_app.client.delete(f"/v1/memories/{parrot}", params={"user_id": user})
            assert resp.is_success, resp.text
        await real_upsert(points)

    vectors.upsert = delete_then_upsert  # type: ignore[method-assign]
    try:
        assert await promoter.run_once() == 1
    finally:
        vectors.upsert = real_upsert  # type: ignore[method-assign]
    assert await _sparse_hits(idle_app, user, "kiwi") == []


def _counting_embedder(
    calls: list[list[str]], refuse: Callable[[list[str]], bool] | None = None, gate: Any = None
) -> OpenAIEmbedder:
    """A stub provider that records each call's lines; `refuse` refuses the calls it picks
    (422), and a call `gate` picks waits until `gate.open` is set."""

    async def provider(request: httpx.Request) -> httpx.Response:
        texts: list[str] = json.loads(request.content)["input"]
        calls.append(texts)
        if gate is not None and gate.picks(texts):
            await gate.open.wait()
        if refuse is not None and refuse(texts):
            return httpx.Response(422)  # this text is refused (`EmbeddingRejected`)
        return httpx.Response(
            200, json={"data": [{"index": i, "embedding": [1.0] * 512} for i in range(len(texts))]}
        )

    return OpenAIEmbedder(
        httpx.AsyncClient(transport=httpx.MockTransport(provider), base_url="http://provider"),
        model="stub",
        dim=512,
        retries=0,
    )


async def test_a_pass_embeds_the_next_slice_of_a_backlog_while_it_writes(
    idle_app: Running,
) -> None:
    """A session with more than one slice of backlog (slices of 7 here): while a pass writes,
    the next slice's lines are embedded, so the next pass asks the model for nothing."""
    user, session = "u-ahead", "s-ahead"
    calls: list[list[str]] = []
    embedder = _counting_embedder(calls)
    r = idle_app.resources
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(r.settings), owner="w"
    )
    await post_messages(
        idle_app, session, user, [turn(f"ahead fact {i}") for i in range(1, 21)], wait=False
    )
    lines = [f"user: ahead fact {i}" for i in range(1, 21)]

    assert await promoter.run_once() == 7
    assert [sorted(c) for c in calls] == [sorted(lines[0:7]), sorted(lines[7:14])]
    assert await promoter.run_once() == 7
    assert [sorted(c) for c in calls[2:]] == [sorted(lines[14:20])]  # only the third slice
    assert await promoter.run_once() == 6
    assert len(calls) == 3  # nothing left behind: nothing embedded ahead
    assert await counts(idle_app, session) == (20, 20, 20)
    found = await recall(idle_app, user, "ahead fact 12", min_relevance=0)
    assert "user: ahead fact 12" in [f["content"] for f in found]
    await embedder.close()


async def test_a_refused_look_ahead_costs_the_pass_nothing(idle_app: Running) -> None:
    """The provider refuses the lines embedded ahead: the pass still commits without a
    failure, and the next pass embeds its slice itself."""
    user, session = "u-ahead-refused", "s-ahead-refused"
    calls: list[list[str]] = []
    refusing = [True]
    embedder = _counting_embedder(
        calls, refuse=lambda texts: refusing[0] and "user: refused 9" in texts
    )
    r = idle_app.resources
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(r.settings), owner="w"
    )
    await post_messages(
        idle_app, session, user, [turn(f"refused {i}") for i in range(1, 11)], wait=False
    )
    assert await promoter.run_once() == 7
    async with r.db.read() as tx:
        row = await session_store.get(tx, r.settings.default_tenant, user, session)
    assert row is not None
    assert (row.indexed_seq, row.promote_failures, row.promote_retry_at) == (7, 0, None)
    assert len(calls) == 2  # the slice, then the refused look-ahead

    refusing[0] = False
    assert await promoter.run_once() == 3
    assert sorted(calls[2]) == sorted(f"user: refused {i}" for i in range(8, 11))
    assert await counts(idle_app, session) == (10, 10, 10)
    await embedder.close()


async def test_a_stopping_worker_does_not_wait_for_its_look_ahead(idle_app: Running) -> None:
    """The look-ahead's model call hangs, and the worker is told to stop once the pass has
    committed its slice (so while it waits for the look-ahead): the pass ends without
    waiting for the call."""
    user, session = "u-ahead-stop", "s-ahead-stop"

    class Gate:
        open = asyncio.Event()
        asked = asyncio.Event()

        def picks(self, texts: list[str]) -> bool:
            if "user: stuck 8" in texts:
                self.asked.set()
                return True
            return False

    gate = Gate()
    calls: list[list[str]] = []
    embedder = _counting_embedder(calls, gate=gate)
    r = idle_app.resources
    stop = asyncio.Event()
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(r.settings), owner="w", stop=stop
    )
    await post_messages(
        idle_app, session, user, [turn(f"stuck {i}") for i in range(1, 11)], wait=False
    )
    passing = asyncio.create_task(promoter.run_once())
    await asyncio.wait_for(gate.asked.wait(), 30)
    for _ in range(600):  # until the slice is committed: the pass then waits on the call
        if (await counts(idle_app, session))[2] == 7:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    stop.set()
    assert await asyncio.wait_for(passing, 5) == 7
    assert await counts(idle_app, session) == (7, 7, 7)
    await embedder.close()


async def test_a_model_in_this_process_is_not_asked_ahead(idle_app: Running) -> None:
    """With the model computing in this process (the bundled one), embedding ahead would
    only share the same cores with the writes: a pass embeds its own slice alone."""
    user, session = "u-ahead-local", "s-ahead-local"
    calls: list[list[str]] = []
    embedder = _counting_embedder(calls)
    embedder.local = True
    r = idle_app.resources
    promoter = Promoter(
        PromoterParts(r.db, r.vectors, embedder), promotion_config(r.settings), owner="w"
    )
    await post_messages(
        idle_app, session, user, [turn(f"local {i}") for i in range(1, 11)], wait=False
    )
    assert await promoter.run_once() == 7
    assert len(calls) == 1
    assert await promoter.run_once() == 3
    assert len(calls) == 2
    await embedder.close()


async def test_the_turn_before_whose_payload_moved_mid_promotion_is_patched_not_rebuilt(
    idle_app: Running,
) -> None:
    """A write that changes only the payload of the turn before the slice (a PATCH of its
    metadata, a reinforcement flush) between the slice's read and its commit: the point
    written from the read takes the row's payload under the lock, without a rebuild."""
    user, session = "u-before-patched", "s-before-patched"
    promoter, locker = await _a_turn_then_its_reply(idle_app, user, session)

    vectors = idle_app.resources.vectors
    real_upsert = vectors.upsert
    rebuilt: list[Any] = []
    real_rebuild = promoter.reindexer.rebuild_rows

    async def patch_then_upsert(points: Any) -> None:
        if not rebuilt and any(str(p.id) == locker for p in points):
            rebuilt.append(None)  # once: mark that the PATCH ran
            resp = await idle_app.client.patch(
                f"/v1/memories/{locker}",
                params={"user_id": user},
                json={"user_id": user, "metadata": {"tag": "gym"}},
            )
            assert resp.is_success, resp.text
        await real_upsert(points)

    async def counting_rebuild(rows: Any) -> Any:
        rebuilt.extend(rows)
        return await real_rebuild(rows)

    vectors.upsert = patch_then_upsert  # type: ignore[method-assign]
    promoter.reindexer.rebuild_rows = counting_rebuild  # type: ignore[method-assign]
    try:
        assert await promoter.run_once() == 1
    finally:
        vectors.upsert = real_upsert  # type: ignore[method-assign]
        promoter.reindexer.rebuild_rows = real_rebuild  # type: ignore[method-assign]
    assert rebuilt == [None]  # the PATCH ran, nothing was rebuilt
    found = await recall(idle_app, user, "gym locker code", min_relevance=0)
    assert [r["metadata"] for r in found if r["id"] == locker] == [{"tag": "gym"}]


@pytest.mark.parametrize("warm", [True, False])
async def test_a_pass_in_the_apis_process_has_its_turns_ready_for_scoring(
    idle_app: Running, warm: bool
) -> None:
    """Embedded, recall scores in the worker's process: a conversation's pass works out its
    new turns' text facts as it writes them, so the first recall that meets them does not
    (a worker of its own, `warm_scoring` off, leaves them alone); an import's larger slice
    does not fill the memo."""
    from app.services.promotion import WARM_SCORING_TURNS
    from app.services.search import text_facts

    user, session = f"u-warm-{warm}", f"s-warm-{warm}"
    r = idle_app.resources
    settings = r.settings.model_copy(update={"worker_batch_messages": 256})
    config = dataclasses.replace(promotion_config(settings), warm_scoring=warm)
    promoter = Promoter(PromoterParts(r.db, r.vectors, r.embedder), config, owner="w")
    texts = [f"warm {warm} turn {i} about a ferry to Lisbon" for i in range(5)]
    await post_messages(idle_app, session, user, [turn(t) for t in texts], wait=False)
    text_facts.clear()
    assert await promoter.run_once() == 5
    assert [(f"user: {t}", "user") in text_facts for t in texts] == [warm] * 5

    bulk = [f"import {warm} line {i}" for i in range(WARM_SCORING_TURNS + 1)]
    await post_messages(idle_app, f"{session}-import", user, [turn(t) for t in bulk], wait=False)
    text_facts.clear()
    assert await promoter.run_once() == len(bulk)
    assert not any((f"user: {t}", "user") in text_facts for t in bulk)
