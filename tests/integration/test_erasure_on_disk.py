"""When an erasure reports done, no byte of the user's text or ids is left in any file of
the embedded service's data directory: SQLite's file and its write-ahead log, the Qdrant
Edge shard's segments and its write-ahead log (docs/privacy.md, "What stays on disk").

The full stack's PostgreSQL, Redis and Qdrant server keep files of their own, which the
service cannot purge: its receipt says so (`purged_from_disk` all false)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from app.core import terms
from app.services.index_upkeep import GraphUpkeep
from app.settings import Settings
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.vectors import MemoryPayload, VectorPoint
from tests.conftest import Running, embedded_settings, post_messages, recall, turn

MESSAGES = 240  # in two sessions, each message with its own marker


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def _holding(files: dict[Path, bytes], needle: str) -> dict[str, int]:
    """The files holding `needle`, with how many times."""
    raw = needle.encode()
    return {p.name: data.count(raw) for p, data in files.items() if raw in data}


async def _erase(running: Running, user: str) -> dict[str, Any]:
    """DELETE the user, then follow the job until it ends; its receipt."""
    resp = await running.client.delete(f"/v1/users/{user}", params={"wait": "false"})
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["job_id"]
    for _ in range(1200):  # not a time limit: the job ends, or the test never passes
        job = (await running.client.get(f"/v1/jobs/{job_id}")).json()
        if job["state"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.1)
    assert job["state"] == "succeeded", job
    done = await running.client.delete(f"/v1/users/{user}")
    assert done.status_code == 200
    result: dict[str, Any] = job["result"]
    return result


async def test_an_erased_users_text_and_ids_leave_every_file_of_the_embedded_store(
    tmp_path: Path, start_app: Callable[[Settings], Any]
) -> None:
    tag = uuid.uuid4().hex[:10]
    user, other = f"erasee-{tag}", f"bystander-{tag}"
    sessions = [f"sess-{tag}-a", f"sess-{tag}-b"]
    marker, kept = f"ZQMARK{tag}", f"KEEPME{tag}"
    async with start_app(embedded_settings(tmp_path)) as running:
        # The bystander writes between the user's batches: pages of SQLite's tables and
        # indexes hold both, and outlive the erasure (a page split leaves copies of moved
        # rows in its free space, which zeroing deleted rows does not reach).
        step = MESSAGES // 8
        for start in range(0, MESSAGES, step):
            session = sessions[start * len(sessions) // MESSAGES]
            turns = [
                turn(
                    f"Note {i}: my locker code is {marker}x{i:04d}, remember it.",
                    id=f"mid-{tag}-{i}",
                )
                for i in range(start, start + step)
            ]
            await post_messages(running, session, user, turns)
            mine = [turn(f"I keep my garden {kept} tidy, day {start + k}.") for k in range(step)]
            await post_messages(running, f"other-{tag}", other, mine)
        scratch = await running.client.put(
            f"/v1/sessions/{sessions[0]}/scratchpad",
            json={"user_id": user, "data": {"todo": f"{marker} scratch"}},
        )
        assert scratch.status_code == 200, scratch.text
        profile = await running.client.patch(
            f"/v1/users/{user}/profile",
            content=orjson.dumps({"city": f"{marker} town"}),
            headers={"content-type": "application/merge-patch+json"},
        )
        assert profile.status_code == 200, profile.text
        written = await running.client.post(
            "/v1/memories",
            json={"user_id": user, "content": f"{marker} likes tea", "memory_type": "semantic"},
        )
        assert written.status_code == 201, written.text

        before = _files(tmp_path)
        # What the test looks for is there to be found: in the database and the index.
        assert any(name.startswith("strata.db") for name in _holding(before, marker))
        assert sum(_holding(before, marker).values()) > MESSAGES
        assert len(_holding(before, user)) > 1

        receipt = await _erase(running, user)
        assert receipt["counts"]["messages"] == MESSAGES
        assert receipt["counts"]["index_points"] >= MESSAGES
        assert receipt["purged_from_disk"] == dict.fromkeys(
            ("database", "index", "index_text", "buffer"), True
        )

        after = _files(tmp_path)
        assert _holding(after, marker) == {}
        for session in sessions:
            assert _holding(after, session) == {}
        assert _holding(after, f"mid-{tag}-") == {}
        # The user id is left in one place: the receipt, the erasure job's row, which names
        # it in its payload, its result and its key, and the key's index (docs/privacy.md,
        # "What is kept, and why"), against hundreds of times before.
        left = _holding(after, user)
        assert set(left) <= {"strata.db", "strata.db-wal"}
        assert max(left.values()) <= 5, left
        # The bystander keeps everything, found by recall and still on disk.
        assert _holding(after, kept)
        assert await recall(running, other, "garden", min_relevance=0)
    # Closed and opened again: what the shard replays at load brings nothing back.
    async with start_app(embedded_settings(tmp_path)) as running:
        assert await recall(running, user, "locker code", min_relevance=0) == []
        assert await recall(running, other, "garden", min_relevance=0)
    assert _holding(_files(tmp_path), marker) == {}


async def test_the_receipt_says_which_stores_files_are_purged(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("user")
    await post_messages(running, ids("session"), user, [turn("I water the ferns on Sundays.")])
    receipt = await _erase(running, user)
    embedded = running.resources.settings.redis_url is None
    # Embedded: SQLite, Qdrant Edge and the in-process buffer, all purged by the service.
    # Full: the Qdrant server keeps its own files; PostgreSQL's and Redis's are purged when
    # their settings let the purge prove it, and a note says why not otherwise (the shared
    # server's wal_recycle; tests/integration/test_erasure_on_disk_full.py) (docs/privacy.md).
    purged = receipt["purged_from_disk"]
    assert purged["index"] is embedded
    notes = purged.get("notes", {})
    for store in ("database", "buffer"):
        assert purged[store] is (store not in notes), purged
        assert purged[store] or not embedded
    # The text a Qdrant server keeps was sealed under the user's key, deleted with the user
    # (tests/integration/test_index_sealing.py); Qdrant Edge's files are purged.
    assert purged["index_text"] is True


def _point(user: str, text: str, rng: np.random.Generator) -> VectorPoint:
    payload = MemoryPayload(
        tenant_id="t",
        user_id=user,
        session_id=f"{user}-s",
        memory_type="episodic",
        content=text,
        importance=0.5,
        sources=[],
        metadata={},
        created_at=datetime.now(UTC),
    )
    dense = rng.standard_normal(16).astype(np.float32).tolist()
    return VectorPoint(uuid.uuid4(), dense, terms.document_vector(text), payload)


async def test_a_purge_rewrites_the_shard_without_deleted_points_and_builds_a_due_graph(
    tmp_path: Path,
) -> None:
    """At the store: a graph build is due (and perhaps under way) when a user is erased; the
    purge leaves no byte of theirs, keeps every other point (one written during the purge
    too), and the swapped-in shard has its graph."""
    rng = np.random.default_rng(7)
    tag = uuid.uuid4().hex[:10]
    index = QdrantEdgeIndex(tmp_path, "c", 16)
    GraphUpkeep(min_points=200, fraction=0.2).keep(index)
    await index.ensure_collection()
    try:
        await index.upsert([_point(f"keep-{tag}", f"KEEP{tag} {i}", rng) for i in range(300)])
        await index.upsert([_point(f"gone-{tag}", f"GONE{tag} {i}", rng) for i in range(300)])
        assert await index.delete_user("t", f"gone-{tag}") == 300
        late = _point(f"keep-{tag}", f"KEEP{tag} late", rng)
        purged, _ = await asyncio.gather(index.purge(), index.upsert([late]))
        assert purged
        assert await index.count() == 301
        assert index.status()["unindexed"] <= 1  # the graph is built (the late point aside)
    finally:
        await index.close()
    files = _files(tmp_path)
    assert _holding(files, f"GONE{tag}") == {}
    assert _holding(files, f"gone-{tag}") == {}
    # What the search would see if it were there: the kept points' owner, in the payload
    # pages (their text is stored compressed, and the built shard's log is empty).
    assert _holding(files, f"keep-{tag}")
    reopened = QdrantEdgeIndex(tmp_path, "c", 16)
    await reopened.ensure_collection()
    try:
        assert await reopened.count() == 301
    finally:
        await reopened.close()
    assert _dirs(tmp_path) == [reopened.path.name]  # no copy, no older directory
