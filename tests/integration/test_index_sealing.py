"""A Qdrant server's files keep what the service cannot purge: the user's text goes into
them sealed under the user's key, and the erasure destroys the key (docs/privacy.md,
"What stays on disk"). Shown on qdrant-client's local mode on disk, whose storage file holds
every payload as it was written, with PostgreSQL and Redis as in production."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from qdrant_client.http import models as qm

from app.core import terms
from app.settings import Settings
from app.stores.models import UserKey
from app.stores.qdrant_server import QdrantServerIndex
from app.stores.vectors import MemoryPayload, VectorPoint, VectorQuery
from tests.conftest import Running, full_settings, post_messages, recall, turn


def _holding(root: Path, needle: str) -> dict[str, int]:
    raw = needle.encode()
    found = {p: p.read_bytes().count(raw) for p in root.rglob("*") if p.is_file()}
    return {p.name: n for p, n in found.items() if n}


async def _key_rows(running: Running, user: str) -> int:
    async with running.resources.db.read() as tx:
        stmt = sa.select(sa.func.count()).select_from(UserKey)
        stmt = stmt.where(UserKey.tenant_id == "default", UserKey.user_id == user)
        return int((await tx.execute(stmt)).scalar_one())


async def _erase(running: Running, user: str) -> dict[str, Any]:
    resp = await running.client.delete(f"/v1/users/{user}", params={"wait": "false"})
    assert resp.status_code == 202, resp.text
    for _ in range(1200):  # not a time limit: the job ends, or the test never passes
        job = (await running.client.get(f"/v1/jobs/{resp.json()['job_id']}")).json()
        if job["state"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.1)
    assert job["state"] == "succeeded", job
    result: dict[str, Any] = job["result"]
    return result


async def test_the_servers_files_hold_no_text_and_an_erasure_destroys_its_key(
    tmp_path: Path,
    pg_databases: Callable[[], Awaitable[str]],
    start_app: Callable[[Settings], Any],
) -> None:
    tag = uuid.uuid4().hex[:10]
    user, other, session = f"sealed-{tag}", f"bystander-{tag}", f"sess-{tag}"
    hobbies = f"hobbies-{tag}"
    marker = f"ZQSEAL{tag}"
    storage = tmp_path / "qdrant"
    # A database of its own: the shared one's apps would promote these turns into their
    # own indexes.
    settings = full_settings(await pg_databases(), qdrant_url=f"path:{storage}")
    async with start_app(settings) as running:
        turns = [turn(f"My locker code is {marker}x{i:03d}, remember it.") for i in range(12)]
        await post_messages(running, session, user, turns)
        note = await running.client.post(
            "/v1/memories",
            json={
                "user_id": user,
                "content": f"{marker} likes green tea",
                "memory_type": "semantic",
                "metadata": {"topic": "drinks", "notes": [f"{marker} nested"]},
            },
        )
        assert note.status_code == 201, note.text
        await post_messages(running, f"o-{tag}", other, [turn("I water the ferns on Sundays.")])
        await post_messages(running, hobbies, user, [turn("I play the cello every evening.")])

        # Recall reads the text back, and filters on plain fields still narrow it.
        found = await recall(running, user, "locker code", min_relevance=0)
        assert any(marker in r["content"] for r in found)
        assert all(r["sources"][0]["session_id"] == session for r in found if r["sources"])
        tea = await recall(running, user, "green tea", metadata={"topic": "drinks"})
        assert [r["content"] for r in tea] == [f"{marker} likes green tea"]
        assert tea[0]["metadata"] == {"topic": "drinks", "notes": [f"{marker} nested"]}
        # A patch of a sealed field (the metadata) is sealed as well, and reads back.
        patched = await running.client.patch(
            f"/v1/memories/{note.json()['id']}",
            json={"user_id": user, "metadata": {"topic": "tea", "by": f"{marker} patch"}},
        )
        assert patched.status_code == 200, patched.text
        tea = await recall(running, user, "green tea", metadata={"topic": "tea"})
        assert tea[0]["metadata"] == {"topic": "tea", "by": f"{marker} patch"}

        # Recall narrowed to a session (`session_ids`, the sessions' ids stored as tags)
        # finds that session's turns only; a deleted session's, none.
        narrowed = {"min_relevance": 0, "session_ids": [hobbies]}
        cello = await recall(running, user, "cello evening", **narrowed)
        assert cello
        assert all("cello" in r["content"] for r in cello)
        mine = await recall(running, user, "cello evening", min_relevance=0, session_ids=[session])
        assert not any("cello" in r["content"] for r in mine)
        gone = await running.client.delete(f"/v1/sessions/{hobbies}", params={"user_id": user})
        assert gone.status_code == 200, gone.text
        assert await recall(running, user, "cello evening", **narrowed) == []

        # The text is nowhere in the server's files, nor the user's or sessions' ids; the
        # bystander's ferns and id, in the index too, neither.
        assert await recall(running, other, "ferns", min_relevance=0)
        assert await recall(running, user, "locker code", min_relevance=0)
        for needle in (marker, "ferns", "cello", user, other, session, hobbies):
            assert _holding(storage, needle) == {}, needle
        assert await _key_rows(running, user) == 1

        receipt = await _erase(running, user)
        assert receipt["purged_from_disk"]["index"] is False  # the server's files are its own
        assert receipt["purged_from_disk"]["index_text"] is True  # but hold no readable text
        assert await _key_rows(running, user) == 0
        assert await _key_rows(running, other) == 1
        assert await recall(running, user, "locker code", min_relevance=0) == []
        assert await recall(running, other, "ferns", min_relevance=0)


async def test_points_written_before_sealing_read_as_they_are_until_patched(
    tmp_path: Path,
    pg_databases: Callable[[], Awaitable[str]],
    start_app: Callable[[Settings], Any],
) -> None:
    """A point of a user whose text and ids were stored plain (before keys existed) is read
    as it is and matched by its plain ids (recall, session narrowing, the erasure); a patch
    of its metadata seals the new value and drops the plain one."""
    tag = uuid.uuid4().hex[:10]
    user, marker, old_session = f"legacy-{tag}", f"ZQOLD{tag}", f"old-sess-{tag}"
    storage = tmp_path / "qdrant"
    # A database of its own: the shared one's apps would promote these turns into their
    # own indexes.
    settings = full_settings(await pg_databases(), qdrant_url=f"path:{storage}")
    async with start_app(settings) as running:
        written = await running.client.post(
            "/v1/memories",
            json={"user_id": user, "content": "Plays the cello", "memory_type": "semantic"},
        )
        assert written.status_code == 201, written.text
        sealed: Any = running.resources.vectors
        assert isinstance(sealed, QdrantServerIndex)
        plain = QdrantServerIndex(sealed.client, sealed.collection, sealed.dim, local=True)
        text = f"Plays the cello since {marker}"
        payload = MemoryPayload(
            tenant_id="default",
            user_id=user,
            session_id=old_session,
            memory_type="semantic",
            content=text,
            importance=0.5,
            sources=[{"session_id": old_session, "message_id": "seq:1", "seq": 1}],
            metadata={"old": marker},
            created_at=datetime.now(UTC),
        )
        dense = (await running.resources.embedder.embed([text]))[0]
        point = VectorPoint(uuid.uuid4(), list(dense), terms.document_vector(text), payload)
        await plain.upsert([point])
        assert _holding(storage, marker)

        found = await recall(running, user, "cello", min_relevance=0)
        assert text in [r["content"] for r in found]
        old = await recall(running, user, "cello", metadata={"old": marker}, min_relevance=0)
        assert [r["content"] for r in old] == [text]  # its plain filter value matches too
        narrowed = await recall(running, user, "cello", session_ids=[old_session], min_relevance=0)
        assert [r["content"] for r in narrowed] == [text]  # its plain session id too

        await sealed.set_payload([(point.id, {"metadata": {"new": "value"}})])
        hits = await sealed.client.retrieve(sealed.collection, [str(point.id)])
        stored = hits[0].payload
        assert stored is not None
        assert "metadata" not in stored
        assert "metadata_sealed" in stored
        assert stored["content"] == text  # not patched: plain as it was
        new = await recall(running, user, "cello", metadata={"new": "value"}, min_relevance=0)
        assert [(r["content"], r["metadata"]) for r in new] == [(text, {"new": "value"})]

        # Their key, as migration 2026_12_07_user_keys gives a user from before keys: the
        # receipt does not claim their text in the server's files is unreadable.
        async with running.resources.db.transaction() as tx:
            await tx.execute(
                sa.update(UserKey)
                .where(UserKey.tenant_id == "default", UserKey.user_id == user)
                .values(sealed_from_start=False)
            )
        receipt = await _erase(running, user)
        assert receipt["purged_from_disk"]["index_text"] is False
        assert await _key_rows(running, user) == 0
        assert await sealed.count() == 0  # its point and the one with tagged ids


async def test_a_user_row_without_a_key_gets_one_on_its_next_point(tmp_path: Path) -> None:
    """A user whose row was written without a key (by a version from before keys, after the
    migration ran) gets one, not sealed from the start, when a point of theirs is written;
    a user without a row (erased) gets none, and their point does not open."""
    from qdrant_client import AsyncQdrantClient

    from app.stores.db import Database, create_engine, migrate
    from app.stores.models import User
    from app.stores.user_keys import UserKeys

    dsn = f"sqlite+aiosqlite:///{tmp_path}/k.db"
    await migrate(dsn)
    db = Database(create_engine(dsn))
    client = AsyncQdrantClient(location=":memory:")
    index = QdrantServerIndex(client, "c", 8, local=True, keys=UserKeys(db))
    await index.ensure_collection()
    try:
        async with db.transaction() as tx:
            tx.add(User(tenant_id="default", id="old", profile={}, created_at=datetime.now(UTC)))
        for user in ("old", "gone"):
            payload = MemoryPayload(
                tenant_id="default",
                user_id=user,
                session_id=None,
                memory_type="semantic",
                content="likes tea",
                importance=0.5,
                sources=[],
                metadata={},
                created_at=datetime.now(UTC),
            )
            point = VectorPoint(uuid.uuid4(), [1.0] * 8, terms.document_vector("tea"), payload)
            await index.upsert([point])
        async with db.read() as tx:
            rows = (await tx.execute(sa.select(UserKey.user_id, UserKey.sealed_from_start))).all()
        assert [tuple(r) for r in rows] == [("old", False)]
        for user, expected in (("old", ["likes tea"]), ("gone", [])):
            query = VectorQuery("default", user, [1.0] * 8, terms.query_vector("tea"), limit=5)
            lists = await index.candidates(query)
            assert [h.payload.content for h in lists.dense] == expected
    finally:
        await client.close()
        await db.close()


async def test_a_point_whose_key_is_gone_is_left_out_and_a_new_key_is_read_again(
    tmp_path: Path,
) -> None:
    """Recall reads keys through a cache: a point stores its user's id as a tag under their
    key, so a process caching the key of a user erased elsewhere finds nothing; once the
    user is made again under the same id (a new key), their new point is found and opens:
    a search that matched nothing reads the key again."""
    from qdrant_client import AsyncQdrantClient

    from app.stores import sessions as session_store
    from app.stores import user_keys
    from app.stores.db import Database, create_engine, migrate
    from app.stores.user_keys import UserKeys

    dsn = f"sqlite+aiosqlite:///{tmp_path}/k.db"
    await migrate(dsn)
    db = Database(create_engine(dsn))
    client = AsyncQdrantClient(location=":memory:")
    index = QdrantServerIndex(client, "c", 8, local=True, keys=UserKeys(db))
    elsewhere = QdrantServerIndex(client, "c", 8, local=True, keys=UserKeys(db))  # a process
    await index.ensure_collection()

    async def make_user() -> None:
        async with db.transaction() as tx:
            await session_store.ensure_user(tx, "default", "ana", datetime.now(UTC))

    async def erase_key() -> None:
        async with db.transaction() as tx:
            await user_keys.delete(tx, "default", "ana")

    def point(text: str) -> VectorPoint:
        payload = MemoryPayload(
            tenant_id="default",
            user_id="ana",
            session_id=None,
            memory_type="semantic",
            content=text,
            importance=0.5,
            sources=[],
            metadata={},
            created_at=datetime.now(UTC),
        )
        return VectorPoint(uuid.uuid4(), [1.0] * 8, terms.document_vector(text), payload)

    async def texts() -> list[str]:
        query = VectorQuery("default", "ana", [1.0] * 8, terms.query_vector("tea"), limit=10)
        lists = await index.candidates(query)
        return sorted(h.payload.content for h in lists.dense)

    try:
        await make_user()
        await index.upsert([point("likes tea")])
        assert await texts() == ["likes tea"]  # the key is cached now

        # Erased elsewhere, as the erasure does it: their points, then their key. This
        # process still caches the old key.
        assert await elsewhere.delete_user("default", "ana") == 1
        await erase_key()
        assert await texts() == []
        await make_user()  # made again: a new key, which sealing reads from the table
        await elsewhere.upsert([point("likes green tea")])
        # Its user's id is a tag under the new key: found once the key is read again.
        assert await texts() == ["likes green tea"]
    finally:
        await client.close()
        await db.close()


async def test_the_sparse_vectors_term_ids_are_keyed_and_still_found(tmp_path: Path) -> None:
    """A sparse vector's term ids are CRC32 hashes of its words, which a word list reverses:
    the server stores them keyed under the user's key. Recall's sparse list still finds the
    point (its query asks for the keyed ids and, for points written before, the plain ones),
    and the hit's terms that are the query's read back as the query's ids."""
    from qdrant_client import AsyncQdrantClient

    from app.stores import sessions as session_store
    from app.stores.db import Database, create_engine, migrate
    from app.stores.user_keys import UserKeys

    dsn = f"sqlite+aiosqlite:///{tmp_path}/k.db"
    await migrate(dsn)
    db = Database(create_engine(dsn))
    client = AsyncQdrantClient(location=":memory:")
    index = QdrantServerIndex(client, "c", 8, local=True, keys=UserKeys(db))
    plain_index = QdrantServerIndex(client, "c", 8, local=True)  # as before sealing
    await index.ensure_collection()
    try:
        async with db.transaction() as tx:
            await session_store.ensure_user(tx, "default", "ana", datetime.now(UTC))
        ids = []
        for writer, text in ((index, "waters the ferns"), (plain_index, "prunes the ferns")):
            payload = MemoryPayload(
                tenant_id="default",
                user_id="ana",
                session_id=None,
                memory_type="semantic",
                content=text,
                importance=0.5,
                sources=[],
                metadata={},
                created_at=datetime.now(UTC),
            )
            point = VectorPoint(uuid.uuid4(), [1.0] * 8, terms.document_vector(text), payload)
            await writer.upsert([point])
            ids.append(str(point.id))
        stored = await client.retrieve("c", ids, with_vectors=["sparse"])
        by_id: dict[str, list[int]] = {}
        for r in stored:
            assert isinstance(r.vector, dict)
            sparse = r.vector["sparse"]
            assert isinstance(sparse, qm.SparseVector)
            by_id[str(r.id)] = list(sparse.indices)
        words = set(terms.document_vector("waters the ferns").indices)
        assert not words & set(by_id[ids[0]])  # keyed: none of the words' ids
        assert set(terms.document_vector("prunes the ferns").indices) == set(by_id[ids[1]])

        asked = terms.query_vector("ferns")
        query = VectorQuery("default", "ana", [1.0] * 8, asked, limit=5)
        lists = await index.candidates(query)
        found = {h.payload.content: h for h in lists.sparse}
        assert set(found) == {"waters the ferns", "prunes the ferns"}
        for hit in found.values():
            assert hit.vectors is not None
            assert set(asked.indices) <= set(hit.vectors.sparse_ids)
    finally:
        await client.close()
        await db.close()
