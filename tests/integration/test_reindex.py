"""The `reindex` job: an index that starts empty beside a full SQL store (a new index
schema, a new model, a lost volume) is rebuilt from the rows, point for point as promotion
and the memory API wrote it, so recall answers as before. A worker enqueues it at start,
once per collection."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from app.services.job_kinds import SYSTEM_TENANT
from app.services.reindex import REINDEX
from app.settings import Settings
from app.stores.models import Job, Memory
from tests.conftest import (
    Running,
    embedded_settings,
    full_settings,
    post_messages,
    recall,
    turn,
)

QUERIES = ["where did we go hiking in June?", "what is my shoe size?"]


@pytest.fixture(params=["full", "embedded"])
async def make_settings(
    request: pytest.FixtureRequest,
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    tmp_path: Path,
) -> Callable[..., Settings]:
    """Settings for apps sharing one SQL store (its own), each with the given overrides."""
    if request.param == "full":
        pg = await pg_databases()
        return lambda **extra: full_settings(pg, **extra)
    return lambda **extra: embedded_settings(tmp_path, **extra)


async def fill(running: Running) -> str:
    """A conversation (with a near-duplicate merged across sessions), a caller-written
    memory and a deleted one; returns the user."""
    user = f"user-{uuid.uuid4().hex[:8]}"
    await post_messages(
        running,
        "trip",
        user,
        [
            turn("Where should we hike this summer?", id="q"),
            turn("We hiked the Alps in June, near Zermatt.", id="a"),
            turn("How was the weather?", role="assistant", id="w"),
            turn("Sunny, but the glacier trail was closed.", id="b"),
            turn("My boots hurt the whole time.", id="c"),
        ],
    )
    await post_messages(
        running, "later", user, [turn("We hiked the Alps in June, near Zermatt.", id="d")]
    )
    for content in ["My shoe size is 44 (EU).", "Temporary note to delete"]:
        resp = await running.client.post(
            "/v1/memories", json={"user_id": user, "content": content, "memory_type": "semantic"}
        )
        assert resp.status_code == 201, resp.text
    gone = (await recall(running, user, "temporary note to delete", min_relevance=0))[0]
    assert gone["content"] == "Temporary note to delete"
    assert (await running.client.delete(f"/v1/memories/{gone['id']}?user_id={user}")).is_success
    return user


async def results(running: Running, user: str) -> list[list[tuple[str, float, float]]]:
    out = []
    asks: list[dict[str, Any]] = [{"query": q} for q in QUERIES]
    asks.append({"query": QUERIES[0], "session_id": "later"})  # source_sessions
    for ask in asks:
        found = await recall(running, user, min_relevance=0, **ask)
        out.append([(r["id"], r["score"], r["scores"]["semantic"]) for r in found])
    return out


def assert_same(before: list[Any], after: list[Any]) -> None:
    for was, now in zip(before, after, strict=True):
        assert [r[0] for r in now] == [r[0] for r in was]
        for (_, score, semantic), (_, score2, semantic2) in zip(was, now, strict=True):
            assert score2 == pytest.approx(score, abs=1e-3)
            assert semantic2 == pytest.approx(semantic, abs=1e-3)


async def wait_for_reindex(running: Running) -> list[Job]:
    """The app's own worker runs the job (its runner claims it)."""
    for _ in range(1200):
        jobs = await reindex_jobs(running)
        if jobs and jobs[0].state in ("succeeded", "failed"):
            return jobs
        await asyncio.sleep(0.1)
    raise AssertionError("the reindex job did not finish")


async def live_ids(running: Running) -> list[uuid.UUID]:
    async with running.resources.db.read() as tx:
        rows = await tx.execute(sa.select(Memory.id).where(Memory.deleted_at.is_(None)))
        return list(rows.scalars())


async def reindex_jobs(running: Running) -> list[Job]:
    async with running.resources.db.read() as tx:
        rows = await tx.execute(sa.select(Job).where(Job.kind == REINDEX))
        return list(rows.scalars())


async def test_a_wiped_index_is_rebuilt_to_the_same_recall(
    make_settings: Callable[..., Settings], start_app: Callable[[Settings], Any]
) -> None:
    async with start_app(make_settings(worker_in_process=True)) as running:
        user = await fill(running)
        before = await results(running, user)
        assert all(before), before
        vectors = running.resources.vectors
        ids = await live_ids(running)
        assert await vectors.count() == len(ids)
        with_turn = await _stored(running, user)

        await vectors.delete(ids)
        assert await vectors.count() == 0
        assert await results(running, user) == [[], [], []]

        # The startup check: enqueued once, whoever asks, and run by the runner.
        reindexer = running.state["container"].reindexer
        jobs = await asyncio.gather(*(reindexer.enqueue_if_empty(max_attempts=3) for _ in range(3)))
        assert all(j is not None for j in jobs)
        assert len({j.id for j in jobs if j is not None}) == 1
        [job] = await reindex_jobs(running)
        assert (job.tenant_id, job.key) == (SYSTEM_TENANT, vectors.collection)
        await wait_for_reindex(running)
        [job] = await reindex_jobs(running)
        assert job.state == "succeeded", job.last_error
        assert job.result is not None
        assert job.result["memories"] == len(ids)
        assert job.result["batches"] == 1

        assert await vectors.count() == len(ids)
        assert_same(before, await results(running, user))
        assert_same_points(with_turn, await _stored(running, user))

        # A second run (a crash and a takeover) rewrites the same points.
        again = await running.state["container"].reindexer.rebuild(batch=2)
        assert again == {"memories": len(ids), "batches": -(-len(ids) // 2)}
        assert await vectors.count() == len(ids)
        assert_same(before, await results(running, user))
        # The index holds points now: nothing more to enqueue.
        assert await reindexer.enqueue_if_empty(max_attempts=3) is None


async def _stored(running: Running, user: str) -> dict[str, Any]:
    """Each of the user's points' stored dense vector, the query's cosine with its turn
    vector (as the embedded index computes it, or from the vector a server returns), its
    terms and role, as recall reads them."""
    from app.core import terms
    from app.stores.vectors import VectorQuery

    [q] = await running.resources.embedder.embed(["hiking boots shoe size Alps"])
    query = VectorQuery(
        running.resources.settings.default_tenant, user, q, terms.query_vector("hiking"), 50
    )
    hits = (await running.resources.vectors.candidates(query)).dense
    dense = await running.resources.vectors.dense_vectors([h.id for h in hits])
    unit_q = np.asarray(q) / np.linalg.norm(q)
    out: dict[str, Any] = {}
    for hit in hits:
        assert hit.vectors is not None
        if hit.cosines is not None:
            turn_cosine = hit.cosines[1]
        else:
            turn = np.asarray(hit.vectors.turn)
            turn_cosine = float(turn @ unit_q / np.linalg.norm(turn))
        out[str(hit.id)] = (
            np.asarray(dense[hit.id]),
            turn_cosine,
            tuple(hit.vectors.sparse_ids),
            hit.payload.role,
            hit.payload.sources,
        )
    return out


def assert_same_points(was: dict[str, Any], now: dict[str, Any]) -> None:
    assert set(now) == set(was)
    for key, (dense, turn_cosine, sparse, role, sources) in was.items():
        dense2, turn_cosine2, sparse2, role2, sources2 = now[key]
        assert len(dense) == len(dense2) > 0
        assert np.allclose(dense2, dense, atol=1e-4)
        assert turn_cosine2 == pytest.approx(turn_cosine, abs=1e-3)
        assert (sparse2, role2, sources2) == (sparse, role, sources)


async def test_a_worker_starting_on_an_empty_index_rebuilds_it(
    make_settings: Callable[..., Settings], start_app: Callable[[Settings], Any]
) -> None:
    """The upgrade: the same SQL, a new (empty) collection. The worker enqueues the reindex
    at start and runs it; recall answers as before. A start on an empty store enqueues none."""
    async with start_app(make_settings(worker_in_process=True)) as running:
        # Both empty: nothing to rebuild.
        reindexer = running.state["container"].reindexer
        assert await reindexer.enqueue_if_empty(max_attempts=3) is None
        assert await reindex_jobs(running) == []
        user = await fill(running)
        before = await results(running, user)
        n = len(await live_ids(running))

    async with start_app(
        make_settings(worker_in_process=True, collection_prefix="upgraded")
    ) as running:
        [job] = await wait_for_reindex(running)
        assert job.state == "succeeded", job.last_error
        assert job.key == running.resources.vectors.collection
        assert job.key.startswith("upgraded_")
        assert job.result is not None
        assert job.result["memories"] == n
        assert_same(before, await results(running, user))


async def _terms_of(running: Running, user: str, memory_id: str) -> set[int]:
    """The term ids of a memory's point, as recall's sparse list reads them (a Qdrant
    server stores them keyed, docs/privacy.md, and reads back those the query asks for:
    the query names the words the test looks for)."""
    from app.core import terms
    from app.stores.vectors import VectorQuery

    [q] = await running.resources.embedder.embed(["shop bakery"])
    query = VectorQuery(
        running.resources.settings.default_tenant, user, q, terms.query_vector("shop bakery"), 20
    )
    found = await running.resources.vectors.candidates(query)
    for hit in [*found.dense, *found.sparse]:
        if str(hit.id) == memory_id:
            assert hit.vectors is not None
            return set(hit.vectors.sparse_ids)
    raise AssertionError(f"memory {memory_id} is not in the index")


async def test_a_turn_promoted_before_its_reply_is_indexed_with_it(
    make_settings: Callable[..., Settings], start_app: Callable[[Settings], Any]
) -> None:
    """The next turn's terms are part of a turn's index entry (docs/architecture.md §3):
    promoted on its own, a turn is rebuilt once its reply is promoted, as a reindex would
    build it, and again without the reply when the reply's memory is deleted."""
    from app.core import terms

    bakery = terms.term_id(terms.tokenize("bakery")[0])
    async with start_app(make_settings(worker_in_process=True)) as running:
        user = f"user-{uuid.uuid4().hex[:8]}"
        await post_messages(running, "shop", user, [turn("I finally opened my own shop!", id="a")])
        [first] = await recall(running, user, "shop", min_relevance=0)
        assert bakery not in await _terms_of(running, user, first["id"])

        reply = turn("A bakery of your own, congratulations!", role="assistant", id="b")
        await post_messages(running, "shop", user, [reply])
        assert bakery in await _terms_of(running, user, first["id"])
        promoted = await _stored(running, user)
        await running.state["container"].reindexer.rebuild()
        assert_same_points(promoted, await _stored(running, user))

        found = await recall(running, user, "bakery", min_relevance=0)
        [second] = [r for r in found if r["sources"][0]["message_id"] == "b"]
        resp = await running.client.delete(f"/v1/memories/{second['id']}?user_id={user}")
        assert resp.is_success, resp.text
        assert bakery not in await _terms_of(running, user, first["id"])
