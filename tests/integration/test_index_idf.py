"""The embedded index weighs the sparse query by its own per-user term counts: its sparse
list is the one Qdrant gives with its IDF over the user's points (`IdfParams(corpus=user)`),
after re-writes, deletes and an erasure, and again after the counts are rebuilt at open."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.core import terms
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.vectors import MemoryPayload, VectorPoint, VectorQuery

DIM = 8
NOW = datetime(2026, 6, 1, tzinfo=UTC)
OWNERS = [("t1", "ana"), ("t1", "bo"), ("t2", "ana")]  # the same user id in two tenants
WORDS = [
    "lisbon",
    "dentist",
    "ryokan",
    "kyoto",
    "booking",
    "moved",
    "city",
    "guitar",
    "lesson",
    "sister",
    "厦门",
    "牙医",
    "周末",
]


def text(rng: np.random.Generator) -> str:
    if rng.random() < 0.05:
        return "ok!"  # no terms at all: still one of the user's points
    return " ".join(rng.choice(WORDS, size=int(rng.integers(1, 6))))


def point(i: int, owner: tuple[str, str], body: str, rng: np.random.Generator) -> VectorPoint:
    payload = MemoryPayload(
        tenant_id=owner[0],
        user_id=owner[1],
        session_id="s",
        memory_type="episodic",
        content=body,
        importance=0.5,
        sources=[],
        metadata={},
        created_at=NOW,
    )
    dense = rng.standard_normal(DIM).astype(np.float32).tolist()
    return VectorPoint(pid(i), dense, terms.document_vector(body), payload)


def pid(i: int) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"idf-test/{i}")


class Reference:
    """A shard as the index was before: Qdrant's IDF modifier, weighed per search."""

    def __init__(self, path: Path) -> None:
        import qdrant_edge as qe

        self.qe = qe
        config = qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)},
            sparse_vectors={"sparse": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        self.shard = qe.EdgeShard.create(str(path), config)

    def upsert(self, points: list[VectorPoint]) -> None:
        qe = self.qe
        self.shard.update(
            qe.UpdateOperation.upsert_points(
                [
                    qe.Point(
                        p.id,
                        {
                            "dense": p.dense,
                            "sparse": qe.SparseVector(p.sparse.indices, p.sparse.values),
                        },
                        {"tenant_id": p.payload.tenant_id, "user_id": p.payload.user_id},
                    )
                    for p in points
                ]
            )
        )

    def delete(self, flt: Any = None, ids: list[uuid.UUID] | None = None) -> None:
        qe = self.qe
        op = (
            qe.UpdateOperation.delete_points(ids)
            if ids is not None
            else qe.UpdateOperation.delete_points_by_filter(flt)
        )
        self.shard.update(op)

    def owner(self, tenant: str, user: str) -> Any:
        qe = self.qe
        return qe.Filter(
            must=[
                qe.FieldCondition("tenant_id", match=qe.MatchValue(tenant)),
                qe.FieldCondition("user_id", match=qe.MatchValue(user)),
            ]
        )

    def sparse(self, tenant: str, user: str, query: str) -> dict[uuid.UUID, float]:
        qe = self.qe
        vec = terms.query_vector(query)
        flt = self.owner(tenant, user)
        found = self.shard.query(
            qe.QueryRequest(
                limit=1000,
                query=qe.Query.Nearest(qe.SparseVector(vec.indices, vec.values), using="sparse"),
                filter=flt,
                params=qe.SearchParams(idf=qe.IdfParams(corpus=flt)),
                with_payload=False,
            )
        )
        return {uuid.UUID(str(p.id)): p.score for p in found}


async def sparse(
    index: QdrantEdgeIndex, tenant: str, user: str, query: str
) -> dict[uuid.UUID, float]:
    lists = await index.candidates(
        VectorQuery(tenant, user, [1.0] * DIM, terms.query_vector(query), limit=1000)
    )
    return {hit.id: hit.score for hit in lists.sparse}


QUERIES = [
    "lisbon",
    "dentist booking",
    "kyoto ryokan city",
    "guitar sister lesson",
    "厦门 周末",
    "牙医",
]


async def assert_same(index: QdrantEdgeIndex, reference: Reference) -> int:
    compared = 0
    for tenant, user in OWNERS:
        for query in QUERIES:
            mine, theirs = (
                await sparse(index, tenant, user, query),
                reference.sparse(tenant, user, query),
            )
            assert mine.keys() == theirs.keys(), (tenant, user, query)
            for key, score in theirs.items():
                assert math.isclose(mine[key], score, rel_tol=1e-5), (tenant, user, query)
            compared += len(theirs)
    return compared


async def test_the_sparse_list_is_qdrants_idf_over_the_user_through_writes_and_reopen(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(11)
    # Skewed owners: the users' IDFs differ, and differ from the shard's.
    owners = [OWNERS[int(k)] for k in rng.choice(3, size=400, p=[0.6, 0.3, 0.1])]
    points = [point(i, owners[i], text(rng), rng) for i in range(400)]
    index = QdrantEdgeIndex(tmp_path / "index", "c", DIM)
    await index.ensure_collection()
    reference = Reference(tmp_path / "reference")
    for start in range(0, 400, 100):
        await index.upsert(points[start : start + 100])
        reference.upsert(points[start : start + 100])
    assert await assert_same(index, reference) > 100

    # Re-written with other words (a merge, an edit): the old terms leave the counts.
    rewritten = [point(i, owners[i], "lisbon lisbon moved", rng) for i in range(0, 120, 3)]
    await index.upsert(rewritten)
    reference.upsert(rewritten)
    gone = [pid(i) for i in range(1, 200, 7)]
    await index.delete(gone)
    reference.delete(ids=gone)
    await assert_same(index, reference)

    # A point that changes hands, one id twice in a batch (the last wins), and a delete
    # naming a point that is not there.
    moved = point(1, ("t1", "ana") if owners[1] != ("t1", "ana") else ("t1", "bo"), "city", rng)
    twice = [point(900, OWNERS[0], "kyoto ryokan", rng), point(900, OWNERS[0], "guitar", rng)]
    for batch in ([moved], twice):
        await index.upsert(batch)
        reference.upsert(batch)
    await index.delete([pid(999_999), pid(3)])
    reference.delete(ids=[pid(999_999), pid(3)])
    await assert_same(index, reference)

    # Erasure of one user leaves the same user id in the other tenant untouched, and the
    # user's next memories are counted from nothing.
    await index.delete_user("t1", "ana")
    reference.delete(flt=reference.owner("t1", "ana"))
    assert await sparse(index, "t1", "ana", "lisbon") == {}
    again = [point(i, ("t1", "ana"), text(rng), rng) for i in range(1000, 1030)]
    await index.upsert(again)
    reference.upsert(again)
    assert await assert_same(index, reference) > 0
    await index.close()

    reopened = QdrantEdgeIndex(tmp_path / "index", "c", DIM)
    await reopened.ensure_collection()  # the counts, counted again from the shard
    assert await assert_same(reopened, reference) > 0
    await reopened.close()


class _AppliedThenFailed:
    """A shard whose next write is stored but reported failed (a time-out after the
    commit): the index cannot know what its counts should be."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard

    def update(self, op: Any) -> None:
        self.shard.update(op)
        raise RuntimeError("timed out")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


async def test_after_a_write_that_failed_the_counts_are_counted_again(tmp_path: Path) -> None:
    from app.errors import VectorStoreUnavailable

    rng = np.random.default_rng(12)
    points = [point(i, OWNERS[i % 3], text(rng), rng) for i in range(150)]
    index = QdrantEdgeIndex(tmp_path / "index", "c", DIM)
    await index.ensure_collection()
    reference = Reference(tmp_path / "reference")
    await index.upsert(points)
    reference.upsert(points)

    more = [point(i, OWNERS[i % 3], "lisbon dentist", rng) for i in range(150, 190)]
    real = index._shard
    index._shard = _AppliedThenFailed(real)
    with pytest.raises(VectorStoreUnavailable, match="timed out"):
        await index.upsert(more)
    index._shard = real
    reference.upsert(more)  # stored all the same
    assert await assert_same(index, reference) > 0
    await index.close()


async def test_a_shard_weighing_by_qdrants_idf_is_emptied_at_open_for_a_rebuild(
    tmp_path: Path,
) -> None:
    """A shard written before the term counts multiplies Qdrant's IDF into its scores and
    cannot unlearn it: the index opens empty (the worker's `reindex` refills it from SQL,
    tests/integration/test_reindex.py), and then scores as Qdrant's per-user IDF would."""
    rng = np.random.default_rng(13)
    points = [point(i, OWNERS[i % 3], text(rng), rng) for i in range(120)]
    old = Reference(tmp_path / "index" / "c")  # the layout every earlier version wrote
    old.upsert(points)
    old.shard.flush()
    old.shard.close()

    index = QdrantEdgeIndex(tmp_path / "index", "c", DIM)
    await index.ensure_collection()
    assert await index.count() == 0
    await index.upsert(points)  # as the rebuild writes them
    reference = Reference(tmp_path / "reference")
    reference.upsert(points)
    assert await assert_same(index, reference) > 0
    await index.close()
