"""The index's payload indexes change how fast a filter is checked, never what passes it:
a shard written before `valid_to` was indexed answers the same once it is reopened (which
adds the index) as it did before."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from app.core import terms
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.vectors import CandidateLists, MemoryPayload, PayloadPatch, VectorPoint, VectorQuery

DIM = 16
TENANT, USER = "t", "u"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def point(i: int, rng: np.random.Generator) -> VectorPoint:
    text = f"word{i % 7} note {i} topic{i % 3}"
    valid_to = None
    if i % 4 == 1:
        valid_to = NOW - timedelta(days=i % 30)  # ended before the query's moment
    elif i % 4 == 2:
        valid_to = NOW + timedelta(days=i % 30)  # ends after it
    payload = MemoryPayload(
        tenant_id=TENANT,
        user_id=USER if i % 5 else "other",
        session_id="s",
        memory_type="episodic",
        content=text,
        importance=0.5,
        sources=[],
        metadata={},
        created_at=NOW - timedelta(days=60 - i % 60),
        valid_to=valid_to,
    )
    v = rng.standard_normal(DIM).astype(np.float32)
    return VectorPoint(pid(i), v.tolist(), terms.document_vector(text), payload)


def pid(i: int) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"filter-test/{i}")


def queries(rng: np.random.Generator) -> list[VectorQuery]:
    out = []
    for n in range(20):
        at = NOW + timedelta(days=int(rng.integers(-40, 40)))
        out.append(
            VectorQuery(
                TENANT,
                USER,
                rng.standard_normal(DIM).astype(np.float32).tolist(),
                terms.query_vector(f"note topic{n % 3} word{n % 7}"),
                limit=30,
                valid_at=at.timestamp() if n % 5 else None,
            )
        )
    return out


def answers(lists: CandidateLists) -> list[list[tuple[uuid.UUID, float]]]:
    return [[(h.id, h.score) for h in hits] for hits in (lists.dense, lists.sparse)]


async def test_a_shard_without_the_valid_to_index_answers_the_same_once_it_is_added(
    tmp_path: Path,
) -> None:
    import qdrant_edge as qe

    rng = np.random.default_rng(7)
    old = QdrantEdgeIndex(tmp_path, "c", DIM)
    await old.ensure_collection()
    # The shard as a version without the index wrote it.
    old._shard.update(qe.UpdateOperation.delete_field_index("valid_to"))
    assert "valid_to" not in old._shard.info().payload_schema
    await old.upsert([point(i, rng) for i in range(400)])
    # A fact that ends later, written in place (as supersession does).
    ended: PayloadPatch = {"valid_to": NOW - timedelta(days=3)}
    await old.set_payload([(pid(i), ended) for i in range(0, 400, 9)])
    asked = queries(rng)
    before = [answers(await old.candidates(q)) for q in asked]
    await old.close()

    new = QdrantEdgeIndex(tmp_path, "c", DIM)
    await new.ensure_collection()
    assert "valid_to" in new._shard.info().payload_schema
    after = [answers(await new.candidates(q)) for q in asked]
    await new.close()

    assert any(lists[0] and lists[1] for lists in before)
    assert after == before
