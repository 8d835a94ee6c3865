"""The embedded index keeps an int8 copy of its searched vector in memory and the originals
on disk (`app/stores/qdrant_edge.py`, `_layout`): a built shard searches and scores on the
copy, within its precision of the vectors written, and a shard written before it gets it
from one build after it opens. The compared `turn` vector has no copy in memory: it is
read from a file of its own (`app/stores/turn_rows.py`, tests/integration/test_turn_rows.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from app.core import terms
from app.services.index_upkeep import GraphUpkeep
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.vectors import MemoryPayload, VectorPoint, VectorQuery

# Qdrant quantizes a segment once its vectors pass its indexing threshold (~10 MB): 512-d
# float32 vectors, a few thousand of them, as the bundled model writes.
DIM = 512
TENANT, USER = "t", "u"


def points(n: int, seed: int) -> list[VectorPoint]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        dense = rng.standard_normal(DIM).astype(np.float32)
        turn = dense + 0.5 * rng.standard_normal(DIM).astype(np.float32)
        text = f"note {i}"
        payload = MemoryPayload(
            tenant_id=TENANT,
            user_id=USER,
            session_id="s",
            memory_type="episodic",
            content=text,
            importance=0.5,
            sources=[],
            metadata={},
            created_at=datetime.now(UTC),
        )
        out.append(
            VectorPoint(
                uuid.uuid5(uuid.NAMESPACE_URL, f"q8/{seed}/{i}"),
                dense.tolist(),
                terms.document_vector(text),
                payload,
                turn=turn.tolist(),
            )
        )
    return out


def cosine(a: list[float], b: list[float]) -> float:
    x, y = np.asarray(a), np.asarray(b)
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def quantized_files(path: Path) -> list[str]:
    return sorted(p.parent.name for p in path.glob("segments/*/*/quantized.data"))


async def test_a_built_shard_scores_on_int8_copies_within_their_precision(tmp_path: Path) -> None:
    written = points(6000, seed=1)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    await index.build_now()
    config = json.loads((index.path / "edge_config.json").read_text())["vectors"]
    for name in ("dense", "turn"):
        assert config[name]["on_disk"] is True
    assert config["dense"]["quantization_config"] == {
        "scalar": {"type": "int8", "always_ram": True}
    }
    assert "quantization_config" not in config["turn"]
    assert quantized_files(index.path) == ["vector_storage-dense"]
    errors, turn_errors = [], []
    for asked in written[:20]:
        query = VectorQuery(TENANT, USER, asked.dense, terms.query_vector("note"), 20)
        hits = (await index.candidates(query)).dense
        assert hits[0].id == asked.id  # the point itself, first
        by_id = {p.id: p for p in written}
        for hit in hits:
            assert hit.cosines is not None
            exact = (
                cosine(asked.dense, by_id[hit.id].dense),
                cosine(asked.dense, by_id[hit.id].turn_vector),
            )
            errors.append(abs(hit.cosines[0] - exact[0]))
            turn_errors.append(abs(hit.cosines[1] - exact[1]))
    assert max(errors) < 0.02  # int8's precision
    assert max(errors) > 0  # and the copies, not the originals, were read
    assert max(turn_errors) < 2e-3  # float16's: `turn` is compared on its stored vectors
    await index.close()


async def test_a_shard_written_before_the_int8_copies_gets_them_from_one_build(
    tmp_path: Path,
) -> None:
    import qdrant_edge as qe

    written = points(6000, seed=2)
    # Built as the release before this one built it: vectors in memory, no int8 copies.
    turn_hnsw = qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10000)
    before = qe.EdgeConfig(
        vectors={
            "dense": qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine),
            "turn": qe.EdgeVectorParams(
                size=DIM,
                distance=qe.Distance.Cosine,
                hnsw_config=turn_hnsw,
                datatype=qe.VectorStorageDatatype.Float16,
            ),
        },
        sparse_vectors={"sparse": qe.EdgeSparseVectorParams()},
    )
    (tmp_path / "c").mkdir()
    shard = qe.EdgeShard.create(str(tmp_path / "c"), before)
    shard.update(
        qe.UpdateOperation.upsert_points(
            [
                qe.Point(
                    p.id,
                    {
                        "dense": p.dense,
                        "turn": p.turn_vector,
                        "sparse": qe.SparseVector(p.sparse.indices, p.sparse.values),
                    },
                    p.payload.to_dict(),
                )
                for p in written
            ]
        )
    )
    shard.optimize()
    shard.flush()
    shard.close()
    assert quantized_files(tmp_path / "c") == []
    # Its graph counted as built over every point: only the missing copies make a build due.
    (tmp_path / "c.current").write_text(json.dumps({"dir": "c", "built_points": len(written)}))

    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    GraphUpkeep(min_points=1000, fraction=0.2).keep(reopened)
    await reopened.ensure_collection()  # every point counts as unbuilt: a build is due
    assert reopened.status()["building"] is True
    for _ in range(600):
        if not reopened.status()["building"]:
            break
        await asyncio.sleep(0.1)
    assert reopened.builds == 1
    assert quantized_files(reopened.path) == ["vector_storage-dense"]
    query = VectorQuery(TENANT, USER, written[7].dense, terms.query_vector("note"), 5)
    assert (await reopened.candidates(query)).dense[0].id == written[7].id
    await reopened.close()


@pytest.mark.parametrize("n", [50])
async def test_a_small_shard_is_searched_on_its_originals(tmp_path: Path, n: int) -> None:
    """Below the build threshold nothing is quantized: the cosines are the originals'."""
    written = points(n, seed=3)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    query = VectorQuery(TENANT, USER, written[3].dense, terms.query_vector("note"), 10)
    hits = (await index.candidates(query)).dense
    assert hits[0].id == written[3].id
    assert hits[0].cosines == pytest.approx(
        (1.0, cosine(written[3].dense, written[3].turn_vector)), abs=1e-3
    )  # float16 turn
    assert quantized_files(index.path) == []
    await index.close()


async def test_reinforcement_leaves_built_points_where_they_are_and_reads_back(
    tmp_path: Path,
) -> None:
    """A patch of the use fields alone (a reinforcement flush) is kept beside the shard:
    patching a built point would copy it out of the graph and the int8 copies, reading its
    originals from disk. Searches return the new use at once; a reopened index gets it from
    SQL (`load_uses`); an erasure takes the erased points' uses with it."""
    written = points(6000, seed=4)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    await index.build_now()
    segments = index._shard.info().segments_count
    when = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
    await index.set_payload(
        [(p.id, {"access_count": 7, "last_accessed_at": when}) for p in written[:500]]
    )
    assert index._shard.info().segments_count == segments  # no point left its segment
    (stored,) = index._shard.retrieve([written[0].id], with_payload=True, with_vector=False)
    assert stored.payload["access_count"] == 0  # the shard's payload is untouched
    query = VectorQuery(TENANT, USER, written[0].dense, terms.query_vector("note"), 5)
    hit = (await index.candidates(query)).dense[0]
    assert hit.id == written[0].id
    assert (hit.payload.access_count, hit.payload.last_accessed_at) == (7, when)
    # Another patch still goes to the shard, and the use read over it stays.
    await index.set_payload([(written[0].id, {"importance": 0.9})])
    index._cached.clear()
    hit = (await index.candidates(query)).dense[0]
    assert (hit.payload.importance, hit.payload.access_count) == (0.9, 7)
    await index.close()

    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    await reopened.ensure_collection()
    hit = (await reopened.candidates(query)).dense[0]
    assert hit.payload.access_count == 0  # nothing on disk: SQL holds the uses
    reopened.load_uses([(written[0].id, 7, when)])
    hit = (await reopened.candidates(query)).dense[0]
    assert (hit.payload.access_count, hit.payload.last_accessed_at) == (7, when)
    assert await reopened.delete_user(TENANT, USER) == 6000
    assert reopened._uses == {}
    await reopened.close()
