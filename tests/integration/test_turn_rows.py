"""The `turn` vectors of the embedded index in a file of their own, read for a recall's
candidates alone (`app/stores/turn_rows.py`): the process holds no copy of them, a row is
the shard's stored vector bit for bit and scores as the shard's own vectors do, and the
file follows the shard through writes, deletes, an erasure, a graph build and a crash
between the two writes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import uuid
from pathlib import Path

import numpy as np

from app.core import terms
from app.services.index_upkeep import GraphUpkeep
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.vectors import VectorPoint, VectorQuery
from tests.integration.test_index_quantized import DIM, TENANT, USER, points, quantized_files

ROW = 16 + 2 * DIM


def rows_file(index: QdrantEdgeIndex) -> Path:
    return index.root / f"{index.collection}.turn"


def stored_turns(index: QdrantEdgeIndex) -> dict[uuid.UUID, np.ndarray]:
    """Every point's `turn` vector as the shard stores it (float16)."""
    out = {}
    offset = None
    import qdrant_edge as qe

    while True:
        records, offset = index._shard.scroll(
            qe.ScrollRequest(offset=offset, limit=1000, with_payload=False, with_vector=["turn"])
        )
        for r in records:
            out[uuid.UUID(str(r.id))] = np.asarray(r.vector["turn"], np.float32).astype(np.float16)
        if offset is None:
            return out


def assert_rows_are_the_shards(index: QdrantEdgeIndex) -> None:
    """The file holds a row for each point of the shard, its stored vector bit for bit,
    and no other id."""
    stored = stored_turns(index)
    rows = index._turns.get(list(stored))
    assert rows.keys() == stored.keys()
    for pid, vector in stored.items():
        assert rows[pid].tobytes() == vector.tobytes()
    data = rows_file(index).read_bytes()
    assert len(data) % ROW == 0
    ids = {data[i : i + 16] for i in range(0, len(data), ROW)} - {bytes(16)}
    assert ids == {pid.bytes for pid in stored}


def with_user(written: list[VectorPoint], user: str) -> list[VectorPoint]:
    for p in written:
        p.payload = dataclasses.replace(p.payload, user_id=user)
    return written


async def test_turn_rows_hold_the_stored_vectors_and_score_as_the_shards_own(
    tmp_path: Path,
) -> None:
    written = points(6000, seed=11)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    await index.build_now()
    # No int8 copy of `turn` in memory: its rows are in the file, one per point.
    assert quantized_files(index.path) == ["vector_storage-dense"]
    assert rows_file(index).stat().st_size == len(written) * ROW
    assert_rows_are_the_shards(index)
    for asked in written[:30]:
        query = VectorQuery(TENANT, USER, asked.dense, terms.query_vector("note"), 20)
        hits = (await index.candidates(query)).dense
        ids = [h.id for h in hits]
        with index._lock:
            exact = index._cosines_read_back(asked.dense, ids)  # the shard's own vectors
        for hit in hits:
            assert hit.cosines is not None
            assert abs(hit.cosines[1] - exact[hit.id][1]) < 1e-9
        # So every ranking the turn cosine takes part in is the one the stored vectors give.
        by_rows = sorted(ids, key=lambda pid: -next(h for h in hits if h.id == pid).cosines[1])  # type: ignore[index]
        assert by_rows == sorted(ids, key=lambda pid: -exact[pid][1])
    await index.close()


async def test_similar_turns_are_the_stored_vectors_above_the_threshold(tmp_path: Path) -> None:
    written = points(200, seed=12)
    for p in written[1:6]:  # five near copies of the first turn
        p.turn = [x + 0.01 for x in written[0].turn_vector]
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    ids = [p.id for p in written[:40]]
    with index._lock:
        similar = index._similar_turns({written[0].id: 0.9}, ids)
    stored = stored_turns(index)
    unit = {
        pid: v.astype(np.float64) / np.linalg.norm(v.astype(np.float64))
        for pid, v in stored.items()
    }
    expected = {pid for pid in ids[1:] if float(unit[written[0].id] @ unit[pid]) >= 0.9}
    assert set(similar) == {written[0].id}
    assert set(similar[written[0].id]) == expected
    assert expected >= {p.id for p in written[1:6]}
    await index.close()


async def test_points_without_a_row_are_compared_on_the_shards_vectors(tmp_path: Path) -> None:
    written = points(60, seed=15)
    for p in written[1:4]:
        p.turn = [x + 0.01 for x in written[0].turn_vector]
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    ids = [p.id for p in written[:30]]
    asked = {written[0].id: 0.5, written[2].id: 0.5}
    with index._lock:
        whole = index._similar_turns(asked, ids)
        index._turns.drop([written[0].id, written[3].id])  # as after a crash between writes
        mended = index._similar_turns(asked, ids)
        index._turns.drop(ids)
        none = index._similar_turns(asked, ids)
    as_dicts = [{pid: dict(m) for pid, m in found.items()} for found in (whole, mended, none)]
    assert as_dicts[0] == as_dicts[1] == as_dicts[2]
    assert {written[1].id, written[2].id, written[3].id} <= set(whole[written[0].id])
    assert written[0].id not in whole[written[0].id]  # never itself
    await index.close()


async def test_writes_deletes_and_an_erasure_keep_the_rows_file_to_the_shard(
    tmp_path: Path,
) -> None:
    mine = with_user(points(30, seed=13), "erasee")
    theirs = with_user(points(30, seed=14), "bystander")
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(mine + theirs)
    assert rows_file(index).stat().st_size == 60 * ROW
    # Rewritten points keep their rows, with the new vectors.
    for p in mine[:5]:
        p.turn = [-x for x in p.turn_vector]
    await index.upsert(mine[:5])
    assert rows_file(index).stat().st_size == 60 * ROW
    assert_rows_are_the_shards(index)
    # A delete zeroes its points' rows: neither their ids nor their vectors stay.
    gone = mine[5:10]
    gone_vectors = {pid: v.tobytes() for pid, v in index._turns.get([p.id for p in gone]).items()}
    await index.delete([p.id for p in gone])
    data = rows_file(index).read_bytes()
    for p in gone:
        assert p.id.bytes not in data
        assert gone_vectors[p.id] not in data
    assert_rows_are_the_shards(index)
    # An erasure zeroes every row of the user.
    erased_vectors = [v.tobytes() for v in index._turns.get([p.id for p in mine]).values()]
    assert await index.delete_user(TENANT, "erasee") == 25
    data = rows_file(index).read_bytes()
    for p in mine:
        assert p.id.bytes not in data
    for vector in erased_vectors:
        assert vector not in data
    assert_rows_are_the_shards(index)
    assert await index.purge()
    assert_rows_are_the_shards(index)
    # Freed rows are written again before the file grows.
    await index.upsert(with_user(points(30, seed=15), "newcomer"))
    assert rows_file(index).stat().st_size == 60 * ROW
    assert_rows_are_the_shards(index)
    await index.close()


async def test_an_open_mends_the_rows_file_after_a_crash_between_the_writes(
    tmp_path: Path,
) -> None:
    written = points(40, seed=16)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    await index.close()
    path = tmp_path / "c.turn"
    stray = uuid.uuid4()
    fd = os.open(path, os.O_RDWR)
    try:
        # A point the shard does not hold (its write failed after the row's), one whose
        # row was lost, and a row cut short.
        size = os.fstat(fd).st_size
        os.pwrite(fd, stray.bytes + bytes(range(256)) * (2 * DIM // 256), size)
        os.pwrite(fd, bytes(ROW), 3 * ROW)
        os.pwrite(fd, b"\1" * 100, size + ROW)
    finally:
        os.close(fd)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    assert stray.bytes not in path.read_bytes()
    assert_rows_are_the_shards(index)
    await index.close()
    # A file lost, or an index from before the file: written whole at open.
    path.unlink()
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    assert_rows_are_the_shards(index)
    query = VectorQuery(TENANT, USER, written[4].dense, terms.query_vector("note"), 5)
    hit = (await index.candidates(query)).dense[0]
    assert hit.id == written[4].id
    assert hit.cosines is not None
    await index.close()


async def test_rows_follow_a_graph_build_with_writes_during_it(tmp_path: Path) -> None:
    written = points(6000, seed=17)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(written)
    build = asyncio.create_task(index.build_now())
    more = points(50, seed=18)
    during = 0  # writes journaled for the copy being built
    for n, p in enumerate(more):
        await index.upsert([p])
        if n < 20:
            await index.delete([written[n].id])
        during += index._journal is not None
        await asyncio.sleep(0.01)
    await build
    assert index.builds == 1
    assert during > 0
    assert_rows_are_the_shards(index)
    assert len(index._turns) == 6000 + 50 - 20
    await index.close()


async def test_a_shard_with_an_int8_copy_of_turn_lets_it_go_at_one_build(tmp_path: Path) -> None:
    """As the release before this one wrote it: both vectors with int8 copies in memory."""
    import qdrant_edge as qe

    written = points(6000, seed=19)
    int8 = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True)
    before = qe.EdgeConfig(
        vectors={
            "dense": qe.EdgeVectorParams(
                size=DIM, distance=qe.Distance.Cosine, on_disk=True, quantization_config=int8
            ),
            "turn": qe.EdgeVectorParams(
                size=DIM,
                distance=qe.Distance.Cosine,
                on_disk=True,
                quantization_config=int8,
                hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10000),
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
    assert quantized_files(tmp_path / "c") == ["vector_storage-dense", "vector_storage-turn"]
    (tmp_path / "c.current").write_text(json.dumps({"dir": "c", "built_points": len(written)}))

    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    GraphUpkeep(min_points=1000, fraction=0.2).keep(reopened)
    await reopened.ensure_collection()
    assert_rows_are_the_shards(reopened)  # written at open, from the shard
    assert reopened.status()["building"] is True
    for _ in range(600):
        if not reopened.status()["building"]:
            break
        await asyncio.sleep(0.1)
    assert reopened.builds == 1
    assert quantized_files(reopened.path) == ["vector_storage-dense"]
    assert_rows_are_the_shards(reopened)
    await reopened.close()
