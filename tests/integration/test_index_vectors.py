"""The embedded index computes the query's cosines with its candidates' vectors itself, and
keeps their payloads and terms: recall scores as it would with every vector and payload
read anew, a point written again is never scored with its old vectors, and the hits
change promotion asks about carry the others similar to them."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.core import terms
from app.services.search import Pool, Score, SearchSpec
from app.settings import Settings
from app.stores.qdrant_edge import _CACHED_BYTES, WRITE_THROUGH_POINTS, QdrantEdgeIndex
from app.stores.vectors import (
    CandidateLists,
    MemoryPayload,
    StoredVectors,
    VectorHit,
    VectorPoint,
    VectorQuery,
)
from app.wiring import score_config

DIM = 16
TENANT, USER = "t", "u"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
WORDS = ["hike", "alps", "cat", "tea", "move", "date", "boxes", "paris"]


def point(i: int, rng: np.random.Generator) -> VectorPoint:
    text = f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} note {i}"
    payload = MemoryPayload(
        tenant_id=TENANT,
        user_id=USER,
        session_id="s",
        memory_type="episodic",
        content=text,
        importance=0.5,
        sources=[],
        metadata={},
        created_at=NOW - timedelta(days=i % 40),
    )
    dense = rng.standard_normal(DIM).astype(np.float32).tolist()
    turn = rng.standard_normal(DIM).astype(np.float32).tolist()
    pid = uuid.uuid5(uuid.NAMESPACE_URL, f"vectors-test/{i}")
    return VectorPoint(pid, dense, terms.document_vector(text), payload, turn)


def query(n: int, rng: np.random.Generator) -> tuple[SearchSpec, VectorQuery]:
    text = f"{WORDS[n % 8]} {WORDS[(n + 3) % 8]} note"
    spec = SearchSpec(tenant_id=TENANT, user_id=USER, query=text, top_k=10, as_of=NOW)
    dense = rng.standard_normal(DIM).astype(np.float32).tolist()
    return spec, VectorQuery(TENANT, USER, dense, terms.query_vector(text), limit=30)


def as_lists(index: QdrantEdgeIndex, lists: CandidateLists) -> CandidateLists:
    """The hits with their vectors read from the shard as lists of floats and no cosines:
    what recall scored before the index computed them."""
    ids = list({h.id for h in (*lists.dense, *lists.sparse)})
    records = index._shard.retrieve(ids, with_payload=True, with_vector=["dense", "turn", "sparse"])
    stored, payloads = {}, {}
    for r in records:
        v = r.vector
        pid = uuid.UUID(str(r.id))
        stored[pid] = StoredVectors(
            dense=v["dense"], turn=v["turn"], sparse_ids=list(v["sparse"].indices)
        )
        payloads[pid] = MemoryPayload.from_dict(r.payload)

    def read(hits: list[VectorHit]) -> list[VectorHit]:
        return [VectorHit(h.id, h.score, payloads[h.id], stored[h.id]) for h in hits]

    return CandidateLists(read(lists.dense), read(lists.sparse))


def scored(spec: SearchSpec, q: VectorQuery, lists: CandidateLists) -> dict[int, float]:
    pool = Pool(lists, 3, q.dense, frozenset(q.sparse.indices))
    return {
        c.hit.id.int: c.score for c in Score(score_config(Settings(_env_file=None)))(spec, pool)
    }


def cosine(a: Any, b: Any) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def assert_cosines_and_scores_as_read_anew(
    index: QdrantEdgeIndex, spec: SearchSpec, q: VectorQuery, lists: CandidateLists
) -> None:
    anew = as_lists(index, lists)
    read = {h.id: h for h in (*anew.dense, *anew.sparse)}
    read_cosines = {h.id: h.cosines for h in (*lists.dense, *lists.sparse)}
    for hit in (*lists.dense, *lists.sparse):
        assert hit.cosines is not None
        assert hit.vectors is not None
        assert not len(hit.vectors.dense)
        stored = read[hit.id].vectors
        assert stored is not None
        assert hit.vectors.sparse_ids == tuple(stored.sparse_ids)
        assert hit.payload == read[hit.id].payload
        # `turn` is float16 in the shard: its cosines within ~1e-3 of ours (rounding).
        assert hit.cosines == pytest.approx(
            (cosine(stored.dense, q.dense), cosine(stored.turn, q.dense)), abs=1e-3
        )
    assert scored(spec, q, lists) == pytest.approx(scored(spec, q, anew), abs=1e-3)
    # The fallback for a point the searches would not score: the same, from the vectors.
    ids = list(read)
    with index._lock:
        again = index._cosines_read_back(q.dense, ids)
    for pid in ids:
        assert again[pid] == pytest.approx(read_cosines[pid], abs=1e-3)


@pytest.mark.parametrize("room", [20, 1000])  # 20: most points pass through and out again
async def test_the_index_cosines_score_as_vectors_read_anew_and_follow_a_rewrite(
    tmp_path: Path, room: int
) -> None:
    rng = np.random.default_rng(11)
    index = QdrantEdgeIndex(tmp_path, "c", DIM, vector_cache_bytes=room * _CACHED_BYTES)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(300)]
    await index.upsert(points)
    asked = [query(n, rng) for n in range(12)]

    sparse_only = 0
    for _ in range(2):  # the first round fills the cache, the second reads it
        for spec, q in asked:
            lists = await index.candidates(q)
            assert lists.dense
            assert lists.sparse
            sparse_only += len({h.id for h in lists.sparse} - {h.id for h in lists.dense})
            assert_cosines_and_scores_as_read_anew(index, spec, q, lists)
            assert len(index._cached) <= room
    assert sparse_only  # some dense cosines came from the search over the hits' ids

    # Written again with new vectors (a re-embedding): never scored with the old ones.
    rewritten = [
        VectorPoint(p.id, p.turn_vector, p.sparse, p.payload, p.dense) for p in points[::2]
    ]
    await index.upsert(rewritten)
    for spec, q in asked:
        lists = await index.candidates(q)
        assert_cosines_and_scores_as_read_anew(index, spec, q, lists)
    await index.close()


async def test_hits_asked_about_carry_the_hits_with_similar_turn_vectors(tmp_path: Path) -> None:
    """Change promotion's comparisons, made in the same call: each hit whose payload the
    query's `compare_turns` gives a cosine carries the other hits whose turn vector has a
    cosine of at least that one with its own, with their cosines (each hit its own
    threshold); the other hits, and every hit of a query that asks nothing, carry None."""
    rng = np.random.default_rng(3)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(40)]
    base = np.asarray(points[0].turn_vector)
    for n in range(1, 40, 3):  # some turns near the first one's
        points[n].turn = (base + 0.5 * rng.standard_normal(DIM)).astype(np.float32).tolist()
    await index.upsert(points)
    turn = {p.id: p.turn_vector for p in points}
    asked = {points[0].id: 0.4, points[6].id: 0.6, points[9].id: 0.3}
    _, q = query(0, rng)
    q = VectorQuery(TENANT, USER, q.dense, q.sparse, limit=40)

    plain = await index.candidates(q)
    assert all(h.similar is None for h in (*plain.dense, *plain.sparse))

    threshold = {p.payload.content: asked[p.id] for p in points if p.id in asked}
    q.compare_turns = lambda payload: threshold.get(payload.content)
    lists = await index.candidates(q)
    hits = {h.id: h for h in (*lists.dense, *lists.sparse)}
    assert set(asked) <= set(hits)
    for pid, h in hits.items():
        if pid not in asked:
            assert h.similar is None
            continue
        assert h.similar is not None
        floor = asked[pid]
        others = set(hits) - {pid}
        near = {o for o in others if cosine(turn[pid], turn[o]) >= floor + 1e-3}
        far = {o for o in others if cosine(turn[pid], turn[o]) < floor - 1e-3}
        assert near <= set(h.similar)
        assert not set(h.similar) & far
        assert set(h.similar) <= others
        for other, found in h.similar.items():  # the cosine itself, to the rows' precision
            assert found == pytest.approx(cosine(turn[pid], turn[other]), abs=5e-3)
    assert len(hits[points[0].id].similar or ()) >= 10  # met by many, not by chance
    await index.close()


@pytest.mark.parametrize("room", [0, 20, 1000])  # 0: no cache, every payload read anew
async def test_cached_payloads_follow_every_write(tmp_path: Path, room: int) -> None:
    """Candidates carry each point's payload as stored now: after a payload patch (a
    reinforcement, a pin), a rewrite, a delete and a user's erasure, never an older one."""
    from dataclasses import replace

    from app.stores.vectors import PayloadPatch

    rng = np.random.default_rng(5)
    index = QdrantEdgeIndex(tmp_path, "c", DIM, vector_cache_bytes=room * _CACHED_BYTES)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(60)]
    await index.upsert(points)
    _, asked = query(0, rng)
    q = VectorQuery(TENANT, USER, asked.dense, asked.sparse, limit=60)

    def payloads(lists: CandidateLists) -> dict[uuid.UUID, MemoryPayload]:
        return {h.id: h.payload for h in (*lists.dense, *lists.sparse)}

    first = payloads(await index.candidates(q))
    assert first == {p.id: p.payload for p in points if p.id in first}
    assert len(index._cached) <= room

    def stored(pid: uuid.UUID) -> MemoryPayload:
        (record,) = index._shard.retrieve([pid], with_payload=True, with_vector=False)
        return MemoryPayload.from_dict(record.payload)

    target = next(iter(first))
    patch = PayloadPatch(
        access_count=7,
        pinned=True,
        last_accessed_at=NOW + timedelta(hours=3, microseconds=123_456),
        metadata={"topic": "travel"},
        sources=[{"session_id": "s2", "message_id": "m9"}],
        session_id=None,
        valid_to=NOW + timedelta(days=2),
    )
    await index.set_payload([(target, patch)])
    patched = payloads(await index.candidates(q))[target]
    assert (patched.access_count, patched.pinned) == (7, True)
    assert patched == stored(target)  # the cached payload is the stored one, field by field

    old = next(p for p in points if p.id == target)
    await index.upsert([replace(old, payload=replace(old.payload, content="rewritten text"))])
    assert payloads(await index.candidates(q))[target].content == "rewritten text"

    await index.delete([target])
    assert target not in payloads(await index.candidates(q))

    assert await index.delete_user(TENANT, USER) == 59
    assert payloads(await index.candidates(q)) == {}
    await index.close()


class _FailingSecondUpdate:
    """The real shard, except that its second `update` raises: a write that fails part way
    (set_payload applies one patch per point)."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.updates = 0

    def update(self, op: Any) -> None:
        self.updates += 1
        if self.updates == 2:
            raise RuntimeError("disk full")
        self.shard.update(op)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


async def test_a_write_that_fails_part_way_leaves_no_stale_cached_payload(tmp_path: Path) -> None:
    """The first patch is stored, the second fails: recall then shows each point as stored
    (the first patched, the second not), not the payloads cached before the write."""
    from app.errors import VectorStoreUnavailable
    from app.stores.vectors import PayloadPatch

    rng = np.random.default_rng(9)
    index = QdrantEdgeIndex(tmp_path, "c", DIM, vector_cache_bytes=1000 * _CACHED_BYTES)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(30)])
    _, asked = query(0, rng)
    q = VectorQuery(TENANT, USER, asked.dense, asked.sparse, limit=30)
    before = {h.id: h.payload for h in (await index.candidates(q)).dense}
    first, second = list(before)[:2]
    assert index._cached[first][0] == before[first]  # cached

    real = index._shard
    index._shard = _FailingSecondUpdate(real)
    with pytest.raises(VectorStoreUnavailable, match="disk full"):
        await index.set_payload(
            [(first, PayloadPatch(importance=0.7)), (second, PayloadPatch(importance=0.8))]
        )
    index._shard = real

    after = {h.id: h.payload for h in (await index.candidates(q)).dense}
    assert after[first].importance == 0.7  # stored before the failure
    assert after[second].importance == before[second].importance
    await index.close()


def _payloads(lists: CandidateLists) -> dict[uuid.UUID, MemoryPayload]:
    return {h.id: h.payload for h in (*lists.dense, *lists.sparse)}


class _CountingUpdates:
    """The real shard, counting its `update` calls."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.updates = 0

    def update(self, op: Any) -> None:
        self.updates += 1
        self.shard.update(op)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


async def test_points_sharing_a_patch_are_patched_in_one_update(tmp_path: Path) -> None:
    """Many points patched alike (a sweep's importance, say): one update per distinct
    patch; a point deleted meanwhile does not keep the others from theirs. (A reinforcement,
    a patch of the use fields alone, is kept beside the shard: test_index_quantized.py.)"""
    from app.stores.vectors import PayloadPatch

    rng = np.random.default_rng(11)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(30)])
    _, asked = query(0, rng)
    q = VectorQuery(TENANT, USER, asked.dense, asked.sparse, limit=30)
    ids = list(_payloads(await index.candidates(q)))
    assert len(ids) == 30
    gone = ids[3]
    await index.delete([gone])

    real = index._shard
    counting = _CountingUpdates(real)
    index._shard = counting
    await index.set_payload(
        [(pid, PayloadPatch(importance=0.2 if n < 20 else 0.5)) for n, pid in enumerate(ids)]
    )
    index._shard = real

    after = _payloads(await index.candidates(q))
    assert gone not in after
    assert {pid: after[pid].importance for pid in after} == {
        pid: 0.2 if n < 20 else 0.5 for n, pid in enumerate(ids) if pid != gone
    }
    # Two patches: two updates, and the group with the deleted point once more per point.
    assert counting.updates == 2 + 20

    # A point given twice keeps its last patch, in the index as in the cache.
    first, other = ids[0], ids[1]
    await index.set_payload(
        [
            (other, PayloadPatch(importance=0.9)),
            (first, PayloadPatch(importance=0.1)),
            (first, PayloadPatch(importance=0.9)),
        ]
    )
    assert _payloads(await index.candidates(q))[first].importance == 0.9  # the cache
    index._cached.clear()
    assert _payloads(await index.candidates(q))[first].importance == 0.9  # the index
    await index.close()


async def test_a_search_runs_on_the_loop_when_the_shard_is_free_and_waits_off_it_when_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free shard is searched on the event loop's thread (no thread hop); one held by a
    write is waited for in a thread, so the loop goes on meanwhile, and the search then
    answers as the free one did."""
    rng = np.random.default_rng(5)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(40)])
    _, q = query(2, rng)

    hops: list[str] = []
    real_to_thread = asyncio.to_thread

    async def counted(fn: Any, *args: Any) -> Any:
        hops.append(getattr(fn, "__name__", "?"))
        return await real_to_thread(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    free = await index.candidates(q)
    assert hops == []  # searched in place
    assert free.dense
    assert free.sparse

    held = threading.Event()
    release = threading.Event()

    def writer() -> None:  # a write holding the shard, as an upsert's thread does
        with index._lock:
            held.set()
            release.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(5)
    ticks = 0

    async def beat() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await asyncio.sleep(0.005)

    async def let_go() -> None:
        await asyncio.sleep(0.2)
        release.set()

    start = time.monotonic()
    busy, _, _ = await asyncio.gather(index.candidates(q), beat(), let_go())
    thread.join()
    assert time.monotonic() - start >= 0.2  # it waited for the write
    assert hops == ["locked"]  # in a thread
    assert ticks >= 10  # and the loop went on meanwhile
    assert [h.id for h in busy.dense] == [h.id for h in free.dense]
    assert [h.id for h in busy.sparse] == [h.id for h in free.sparse]

    # After a failed write the terms are counted again first (~1 s at 100k): in a thread.
    index._terms_stale = True
    hops.clear()
    stale = await index.candidates(q)
    assert hops == ["locked"]
    assert not index._terms_stale
    assert [h.id for h in stale.sparse] == [h.id for h in free.sparse]
    await index.close()


async def test_a_small_write_fills_the_payload_cache_as_a_read_would_and_an_import_does_not(
    tmp_path: Path,
) -> None:
    """A conversation's promotion pass (a few points) leaves its points in the payload
    cache, each as reading it back would give it, and a rewrite replaces them; an import's
    slice (more than `WRITE_THROUGH_POINTS`) adds nothing to the cache."""
    rng = np.random.default_rng(8)
    index = QdrantEdgeIndex(tmp_path, "c", DIM, vector_cache_bytes=1000 * _CACHED_BYTES)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(WRITE_THROUGH_POINTS + 1)])
    assert not index._cached

    small = [point(i, rng) for i in range(100, 110)]
    await index.upsert(small)
    assert set(index._cached) == {p.id for p in small}
    written = dict(index._cached)
    index._cached.clear()
    with index._lock:
        assert index._stored([p.id for p in small]) == written  # read back: the same

    text = "tea paris rewritten"
    again = [
        VectorPoint(
            p.id,
            p.dense,
            terms.document_vector(text),
            dataclasses.replace(p.payload, content=text),
            p.turn_vector,
        )
        for p in small[:3]
    ]
    await index.upsert(again)
    rewritten = {pid: index._cached[pid] for pid in (p.id for p in again)}
    assert {stored[0].content for stored in rewritten.values()} == {text}
    index._cached.clear()
    with index._lock:
        assert index._stored(list(rewritten)) == rewritten
    await index.close()
