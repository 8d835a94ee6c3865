"""The embedded index builds its HNSW graph off to the side (a copy in a child process)
and swaps it in: queries answer the whole time, writes made during the build survive the
swap, and a restart opens the built directory."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.core import terms
from app.services.index_upkeep import GraphUpkeep
from app.stores.edge_log import start_afresh
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.vectors import MemoryPayload, VectorPoint, VectorQuery
from app.wiring import open_container
from tests.conftest import embedded_settings

DIM = 16
TENANT, USER = "t", "u"


def point(i: int, rng: np.random.Generator, dim: int = DIM) -> VectorPoint:
    v = rng.standard_normal(dim).astype(np.float32)
    text = f"word{i % 7} note {i}"
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
    return VectorPoint(pid(i), v.tolist(), terms.document_vector(text), payload)


def pid(i: int) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"build-test/{i}")


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def turn_cosines(asked: VectorPoint, found: VectorPoint) -> tuple[float, float]:
    """The cosines of `asked`'s query (`query_for`) with `found`'s dense and turn vectors."""
    q = unit(asked.dense)
    return float(unit(found.dense) @ q), float(unit(found.turn_vector) @ q)


def generations(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("c.gen*"))


def query_for(p: VectorPoint, limit: int = 5) -> VectorQuery:
    return VectorQuery(TENANT, USER, p.dense, terms.query_vector("note"), limit)


async def nearest(index: QdrantEdgeIndex, p: VectorPoint) -> uuid.UUID:
    return (await index.candidates(query_for(p))).dense[0].id


async def test_queries_answer_during_and_after_a_build_and_writes_survive_the_swap(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(3)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(600)]
    await index.upsert(points)

    build = asyncio.create_task(index.build_now())
    answered = 0
    written: list[VectorPoint] = []
    while not build.done():
        probe = points[answered % len(points)]
        assert await nearest(index, probe) == probe.id  # its own vector is nearest
        answered += 1
        if len(written) < 50:  # writes made while the copy is being built
            new = point(1000 + len(written), rng)
            await index.upsert([new])
            written.append(new)
        await asyncio.sleep(0.005)
    await build
    assert answered > 0
    assert index.builds == 1
    assert index.path.name.startswith("c.gen")

    await index.delete([points[0].id])  # after the swap, on the built shard
    for p in [*points[1:50], *written]:
        assert await nearest(index, p) == p.id
    hits = await index.candidates(query_for(points[0], limit=600 + 50))
    assert points[0].id not in {h.id for h in hits.dense}
    assert len(hits.dense) == 599 + len(written)
    assert {h.id for h in hits.sparse} <= {h.id for h in hits.dense}
    await index.close()

    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    await reopened.ensure_collection()
    assert reopened.path == index.path  # the built directory, named by c.current
    assert not (tmp_path / "c").exists()  # the pre-build directory is gone
    assert await reopened.count() == 599 + len(written)
    assert await nearest(reopened, written[-1]) == written[-1].id
    # Written after the copy: not in the graph yet (a delete counts against them).
    assert 0 < reopened.status()["unindexed"] <= len(written)
    await reopened.close()


async def test_a_build_starts_by_itself_once_enough_points_are_new(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    GraphUpkeep(min_points=200, fraction=0.2).keep(index)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(150)])
    assert not index.status()["building"]
    await index.upsert([point(i, rng) for i in range(150, 250)])
    assert index.status()["building"]
    builder = index._builder
    assert builder is not None
    await builder
    assert index.builds == 1
    assert index.status()["unindexed"] == 0
    await index.close()


async def test_the_container_builds_the_graph_when_the_settings_say(tmp_path: Path) -> None:
    """The thresholds reach the embedded index through its upkeep (app/wiring.py)."""
    rng = np.random.default_rng(11)
    settings = embedded_settings(tmp_path, index_build_min_points=100, index_build_fraction=0.0)
    async with open_container(settings) as c:
        index = c.resources.vectors
        assert isinstance(index, QdrantEdgeIndex)
        await index.upsert([point(i, rng, index.dim) for i in range(99)])
        assert not index.status()["building"]
        await index.upsert([point(99, rng, index.dim)])
        assert index.status()["building"]


async def test_closing_during_a_build_leaves_the_live_directory_alone(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    GraphUpkeep(min_points=100, fraction=0.0).keep(index)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(300)])
    await asyncio.sleep(0.05)
    await index.close()  # cancels the build and kills its child
    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    await reopened.ensure_collection()
    assert await reopened.count() == 300
    # Either the build was cut short and its copy removed, or it finished and is live.
    assert generations(tmp_path) in ([], [reopened.path.name])
    await reopened.close()


async def test_a_user_erased_during_a_build_stays_erased_after_the_swap(tmp_path: Path) -> None:
    """The copy being built was taken before the erasure: the erasure must reach it too, or
    the swap brings the erased user's memories back into recall."""
    rng = np.random.default_rng(6)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(300)]
    await index.upsert(points)
    other = VectorPoint(
        pid(9999),
        points[0].dense,
        points[0].sparse,
        dataclasses.replace(points[0].payload, user_id="someone-else"),
    )
    await index.upsert([other])

    build = asyncio.create_task(index.build_now())
    for _ in range(60_000):  # until the copy is taken and its journal opened
        if index._journal is not None or build.done():
            break
        await asyncio.sleep(0.001)
    assert not build.done()
    assert await index.delete_user(TENANT, USER) == 300
    assert index.status()["points"] == 1
    await build
    assert index.builds == 1

    assert (await index.candidates(query_for(points[0], limit=400))).dense == []
    assert await index.count() == 1  # the other user's point only
    await index.close()
    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    await reopened.ensure_collection()
    assert await reopened.count() == 1
    await reopened.close()


async def test_a_shard_written_before_the_turn_layout_opens_answers_and_builds(
    tmp_path: Path,
) -> None:
    """A shard whose `turn` vectors are float32 with a graph (before this version) cannot
    change their type: it opens with what it can take (no graph for `turn`), answers as
    before, and a build carries it over."""
    import json

    import qdrant_edge as qe

    rng = np.random.default_rng(8)
    points = [point(i, rng) for i in range(300)]
    old = qe.EdgeConfig(
        vectors={
            n: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine) for n in ("dense", "turn")
        },
        # The sparse vector as today's (one with the IDF modifier is rebuilt instead:
        # tests/integration/test_index_idf.py).
        sparse_vectors={"sparse": qe.EdgeSparseVectorParams()},
    )
    (tmp_path / "c").mkdir()
    shard = qe.EdgeShard.create(str(tmp_path / "c"), old)
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
                for p in points
            ]
        )
    )
    shard.flush()
    shard.close()

    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    stored = json.loads((index.path / "edge_config.json").read_text())["vectors"]["turn"]
    assert stored["hnsw_config"]["m"] == 0
    assert "datatype" not in stored  # still float32: the type of stored vectors stays
    hits = await index.candidates(query_for(points[3], limit=10))
    assert hits.dense[0].id == points[3].id
    assert hits.dense[0].cosines == pytest.approx(
        turn_cosines(points[3], points[3]), abs=1e-5
    )  # float32: as written
    await index.upsert([point(i, rng) for i in range(300, 350)])
    await index.build_now()
    assert await index.count() == 350
    assert await nearest(index, points[7]) == points[7].id
    built = json.loads((index.path / "edge_config.json").read_text())["vectors"]["turn"]
    assert index.path.name.startswith("c.gen")  # the built copy, optimised by the child
    assert built["hnsw_config"]["m"] == 0
    assert "datatype" not in built
    again = (await index.candidates(query_for(points[11], limit=400))).dense
    found = next(h for h in again if h.id == points[11].id)
    assert found.cosines == pytest.approx(turn_cosines(points[11], points[11]), abs=1e-5)
    await index.close()


async def test_a_new_shard_stores_turn_vectors_as_float16(tmp_path: Path) -> None:
    """Half the memory for the vector that is read back, never searched; what recall scores
    with stays within float16's precision of what was written."""
    import json

    rng = np.random.default_rng(9)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(50)]
    await index.upsert(points)
    stored = json.loads((index.path / "edge_config.json").read_text())["vectors"]
    assert stored["turn"]["datatype"] == "float16"
    assert "datatype" not in stored["dense"]  # searched: float32
    hits = (await index.candidates(query_for(points[5], limit=5))).dense
    assert hits[0].id == points[5].id
    (record,) = index._shard.retrieve([points[5].id], with_payload=False, with_vector=["turn"])
    written = unit(points[5].turn_vector)  # cosine: stored normalised
    stored_turn = np.asarray(record.vector["turn"])
    assert not np.array_equal(stored_turn, written)  # rounded to float16 ...
    assert np.allclose(stored_turn, written, rtol=1e-3, atol=1e-3)  # ... no further
    for h in hits:  # and the cosines recall scores with are within its precision
        p = next(p for p in points if p.id == h.id)
        assert h.cosines == pytest.approx(turn_cosines(points[5], p), abs=1e-3)
    await index.close()


class _AppliesThenFails:
    """The real shard, except that `update` raises after applying: a write whose outcome
    the caller cannot know."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard

    def update(self, op: Any) -> None:
        self.shard.update(op)
        raise RuntimeError("disk full")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


async def test_an_erasure_that_fails_during_a_build_still_reaches_the_copy(
    tmp_path: Path,
) -> None:
    """The live shard applied the erasure, then the call failed: the copy being built gets
    it too, so the swap does not bring the erased memories back."""
    from app.errors import VectorStoreUnavailable

    rng = np.random.default_rng(10)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(300)]
    await index.upsert(points)
    build = asyncio.create_task(index.build_now())
    for _ in range(60_000):
        if index._journal is not None or build.done():
            break
        await asyncio.sleep(0.001)
    assert not build.done()
    real = index._shard
    index._shard = _AppliesThenFails(real)
    with pytest.raises(VectorStoreUnavailable, match="disk full"):
        await index.delete_user(TENANT, USER)
    index._shard = real
    await build
    assert index.builds == 1
    assert (await index.candidates(query_for(points[0], limit=400))).dense == []
    await index.close()


async def test_an_older_schemas_index_is_removed_at_open_and_no_other(tmp_path: Path) -> None:
    """After an upgrade the index is rebuilt from SQL into today's collection; the older
    schema's (its directory, a built generation, its pointer, its `turn` rows) would hold
    its disk for good."""
    for name in ("old", "old.gen1796157515732", "other"):
        (tmp_path / name / "segments").mkdir(parents=True)
    (tmp_path / "old.current").write_text('{"dir": "old.gen1796157515732"}')
    (tmp_path / "old.turn").write_bytes(bytes(16 + 2 * DIM))  # its `turn` rows
    index = QdrantEdgeIndex(tmp_path, "c", DIM, superseded=["old"])
    await index.ensure_collection()
    await index.upsert([point(0, np.random.default_rng(1))])
    assert await index.count() == 1
    await index.close()
    assert sorted(os.listdir(tmp_path)) == ["c", "c.turn", "other"]


async def test_the_heap_a_shard_load_frees_is_given_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replaying a shard's write-ahead log at load allocates and frees ~33 MiB a dense
    vector, which glibc keeps (157 MiB at 100k memories, bench/HISTORY.md): the index trims
    after opening a shard and after swapping a built copy in."""
    from app import malloc

    trims: list[str] = []

    def trim() -> bool:
        trims.append("trim")
        return True

    monkeypatch.setattr(malloc, "trim", trim)
    rng = np.random.default_rng(6)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert([point(i, rng) for i in range(50)])
    await index.close()
    trims.clear()

    reopened = QdrantEdgeIndex(tmp_path, "c", DIM)
    await reopened.ensure_collection()
    assert trims == ["trim"]
    trims.clear()
    await reopened.build_now()
    assert len(trims) == 2  # the built copy loaded; the old shard closed
    assert await reopened.count() == 50
    await reopened.close()


def logged_upserts(shard: Path) -> int:
    """How many upserts the write-ahead log of the shard at `shard` holds (each entry
    names its operation in CBOR; a segment's unused tail is zeros)."""
    return sum(p.read_bytes().count(b"upsert_points") for p in (shard / "wal").iterdir())


async def test_a_built_copy_is_swapped_in_with_nothing_in_its_log_to_replay(
    tmp_path: Path,
) -> None:
    """The child empties the copy's write-ahead log once it is flushed (app/stores/edge_log.py):
    the api's load of the copy replayed the live shard's log, ~80 MiB more at the swap at
    90k points (docs/reliability.md, "Memory at 100k memories")."""
    rng = np.random.default_rng(12)
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(400)]
    for start in range(0, 400, 100):
        await index.upsert(points[start : start + 100])
    assert logged_upserts(index.path) == 4
    await index.build_now()
    try:
        assert logged_upserts(index.path) == 0
        assert await index.count() == 400
        for p in points[::40]:
            assert await nearest(index, p) == p.id
        await index.upsert([point(400, rng)])  # the log takes writes again
        assert logged_upserts(index.path) == 1
    finally:
        await index.close()


async def test_writes_after_a_swap_outlive_a_crash(tmp_path: Path) -> None:
    """Writes to a swapped-in copy are numbered after every operation its segments hold:
    a segment skips a write numbered below its version. A rewritten point, a deleted one
    and a new one, in the log alone (the files copied as a crash leaves them, no flush),
    are all there when the copy is opened."""
    rng = np.random.default_rng(13)
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    index = QdrantEdgeIndex(live, "c", DIM)
    await index.ensure_collection()
    points = [point(i, rng) for i in range(300)]
    await index.upsert(points)
    await index.build_now()
    moved = dataclasses.replace(points[1], dense=point(1, rng).dense)
    new = point(300, rng)
    try:
        await index.upsert([moved, new])
        await index.delete([points[2].id])
        assert await nearest(index, moved) == moved.id
        shutil.copytree(live, crashed)
    finally:
        await index.close()
    reopened = QdrantEdgeIndex(crashed, "c", DIM)
    await reopened.ensure_collection()
    try:
        assert await reopened.count() == 300
        assert await nearest(reopened, moved) == moved.id
        assert await nearest(reopened, new) == new.id
        hits = await reopened.candidates(query_for(points[2], limit=300))
        assert points[2].id not in {h.id for h in hits.dense}
    finally:
        await reopened.close()


def test_a_log_whose_numbering_cannot_be_read_is_kept(tmp_path: Path) -> None:
    """Without the acknowledged index (a layout Edge may change), the copy keeps its log
    and its load replays it, rather than numbering writes under the segments' versions."""
    (tmp_path / "wal").mkdir()
    (tmp_path / "wal" / "open-1").write_bytes(b"wal\x00" + bytes(12))
    assert start_afresh(tmp_path) is None
    assert sorted(p.name for p in (tmp_path / "wal").iterdir()) == ["open-1"]
    (tmp_path / "wal" / "first-index").write_text('{"ack_index":41}')
    (tmp_path / "segments" / "a").mkdir(parents=True)
    (tmp_path / "segments" / "a" / "segment.json").write_text('{"version":57}')
    assert start_afresh(tmp_path) == 58
    assert sorted(p.name for p in (tmp_path / "wal").iterdir()) == ["closed-58", "first-index"]
