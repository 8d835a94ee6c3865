"""When an erasure reports done on the full stack, no byte of the user's text or ids is left in
PostgreSQL's files (the database's table, TOAST and index files, and `pg_wal`) nor in
Redis's (its RDB snapshot and AOF), or the receipt says which store's are not and why
(docs/privacy.md, "What stays on disk").

The tests read the server's own files: PostgreSQL's data directory (they run as root beside
it) and the directory of a Redis started here with persistence on. `wal_recycle` is the
shared server's: a test that changes it puts the previous value back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from app.errors import DatabaseUnavailable
from app.resources import _warn_purge_blockers
from app.settings import Settings
from app.stores.buffer import Buffer
from app.stores.db import Database, create_engine
from tests.conftest import PG_ADMIN_DSN, Running, full_settings, post_messages, turn
from tests.integration.test_erasure_on_disk import _erase

MESSAGES = 120  # in two sessions, each message with its own marker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def _redis_server(directory: Path, *args: str) -> AsyncIterator[str]:
    """A redis-server of the test's own in `directory`; its URL."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    process = await asyncio.create_subprocess_exec(
        *command, *args, stdout=asyncio.subprocess.DEVNULL
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = Redis.from_url(url)
        for _ in range(200):  # not a time limit: the server answers, or the test fails
            with contextlib.suppress(OSError, RedisConnectionError):
                if await client.ping():
                    break
            await asyncio.sleep(0.05)
        await client.aclose()
        yield url
    finally:
        process.terminate()
        await process.wait()


@pytest.fixture
async def persistent_redis(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """Redis with both files on: an append-only file and a snapshot rule."""
    directory = tmp_path / "redis"
    directory.mkdir()
    async with _redis_server(directory, "--appendonly", "yes", "--save", "3600 1") as url:
        yield url, directory


async def _admin() -> asyncpg.Connection[Any]:
    conn: asyncpg.Connection[Any] = await asyncpg.connect(PG_ADMIN_DSN)
    return conn


@contextlib.asynccontextmanager
async def _wal_recycle(value: str) -> AsyncIterator[None]:
    """The shared server's `wal_recycle` set to `value`, and put back as it was after."""
    conn = await _admin()
    try:
        row = await conn.fetchrow(
            "SELECT setting, sourcefile FROM pg_settings WHERE name = 'wal_recycle'"
        )
        assert row is not None
        await conn.execute(f"ALTER SYSTEM SET wal_recycle = {value}")
        await conn.execute("SELECT pg_reload_conf()")
        await _until_setting("wal_recycle", value)
        try:
            yield
        finally:
            if (row["sourcefile"] or "").endswith("postgresql.auto.conf"):
                await conn.execute(f"ALTER SYSTEM SET wal_recycle = {row['setting']}")
            else:
                await conn.execute("ALTER SYSTEM RESET wal_recycle")
            await conn.execute("SELECT pg_reload_conf()")
            await _until_setting("wal_recycle", row["setting"])
    finally:
        await conn.close()


async def _until_setting(name: str, value: str) -> None:
    """Until a new session sees it (pg_reload_conf only signals the postmaster)."""
    for _ in range(200):  # not a time limit: the server reloads, or the test fails
        conn = await _admin()
        try:
            if await conn.fetchval(f"SHOW {name}") == value:
                return
        finally:
            await conn.close()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never became {value}")


@contextlib.asynccontextmanager
async def _wal_kept(name: str) -> AsyncIterator[None]:
    """The server keeps every WAL segment written from now on until the block ends (a
    physical replication slot): another test process's checkpoints (`make test` runs two)
    would otherwise remove the segment that holds what this test looks for."""
    conn = await _admin()
    try:
        await conn.execute("SELECT pg_create_physical_replication_slot($1, true)", name)
        try:
            yield
        finally:
            await conn.execute("SELECT pg_drop_replication_slot($1)", name)
    finally:
        await conn.close()


async def _checkpoint() -> None:
    conn = await _admin()
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


class ServerFiles:
    """The files PostgreSQL keeps for one database: its directory under `base/`, `pg_wal`."""

    def __init__(self, data_dir: Path, oid: int) -> None:
        self.database = data_dir / "base" / str(oid)
        self.wal = data_dir / "pg_wal"

    @classmethod
    async def of(cls, dsn: str) -> ServerFiles:
        conn = await _admin()
        try:
            data_dir = Path(await conn.fetchval("SHOW data_directory"))
            name = dsn.rsplit("/", 1)[1]
            oid = await conn.fetchval("SELECT oid FROM pg_database WHERE datname = $1", name)
        finally:
            await conn.close()
        files = cls(data_dir, int(oid))
        try:
            next(files.database.iterdir())
        except OSError:
            pytest.skip(f"PostgreSQL's data directory {data_dir} cannot be read here")
        return files

    def holding(self, needle: str) -> dict[str, int]:
        """Where `needle` is, per area (`database`, `wal`): how many times."""
        raw = needle.encode()
        found = {}
        for area, root in (("database", self.database), ("wal", self.wal)):
            count = sum(data.count(raw) for data in _read_all(root))
            if count:
                found[area] = count
        return found

    def paths(self, needle: str) -> list[str]:
        """The files holding `needle` (for a failure's message)."""
        raw = needle.encode()
        return [
            str(path)
            for root in (self.database, self.wal)
            for path in sorted(root.rglob("*"))
            if path.is_file() and raw in path.read_bytes()
        ]


def _read_all(root: Path) -> Iterator[bytes]:
    for path in sorted(root.rglob("*")):
        with contextlib.suppress(FileNotFoundError):  # a segment removed meanwhile
            if path.is_file():
                yield path.read_bytes()


def _redis_holding(directory: Path, needle: str) -> int:
    return sum(data.count(needle.encode()) for data in _read_all(directory))


async def _fill(running: Running, user: str, other: str, tag: str) -> None:
    """The user's turns, each with a marker of its own, interleaved with a bystander's (so
    pages of every table hold both), a scratchpad, a profile and a memory of theirs."""
    marker, kept = f"ZQMARK{tag}", f"KEEPME{tag}"
    step = MESSAGES // 6
    for start in range(0, MESSAGES, step):
        session = f"sess-{tag}-{'ab'[start * 2 // MESSAGES]}"
        turns = [
            turn(f"Note {i}: my locker code is {marker}x{i:04d}.", id=f"mid-{tag}-{i}")
            for i in range(start, start + step)
        ]
        await post_messages(running, session, user, turns)
        mine = [turn(f"I keep my garden {kept} tidy, day {start + k}.") for k in range(step)]
        await post_messages(running, f"other-{tag}", other, mine)
    scratch = await running.client.put(
        f"/v1/sessions/sess-{tag}-a/scratchpad",
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


async def test_an_erased_users_text_and_ids_leave_postgresql_and_redis_files(
    pg_databases: Callable[[], Awaitable[str]],
    persistent_redis: tuple[str, Path],
    start_app: Callable[[Settings], Any],
) -> None:
    redis_url, redis_dir = persistent_redis
    dsn = await pg_databases()
    files = await ServerFiles.of(dsn)
    tag = uuid.uuid4().hex[:10]
    user, other = f"erasee-{tag}", f"bystander-{tag}"
    marker, kept = f"ZQMARK{tag}", f"KEEPME{tag}"
    async with (
        _wal_recycle("off"),
        start_app(full_settings(dsn, redis_url=redis_url)) as running,
    ):
        async with _wal_kept(f"strata_test_{tag}"):
            await _fill(running, user, other, tag)
            # What the test looks for is there to be found: in the tables (once the server
            # wrote its pages out), the WAL and Redis's append-only file.
            await _checkpoint()
            assert set(files.holding(marker)) == {"database", "wal"}
            assert _redis_holding(redis_dir, marker)

        receipt = await _erase(running, user)
        assert receipt["counts"]["messages"] == MESSAGES
        purged = receipt["purged_from_disk"]
        assert (purged["database"], purged["buffer"]) == (True, True), purged
        assert "notes" not in purged

        for needle in (marker, f"sess-{tag}-", f"mid-{tag}-"):
            assert files.holding(needle) == {}, files.paths(needle)
            assert _redis_holding(redis_dir, needle) == 0, needle
        # The user id is left in the receipt only: the erasure job's row (payload, result,
        # key, the key's index) and, in the WAL, its updates since the purge (the receipt's
        # `purged_from_disk`, the job's end), against hundreds before.
        left = files.holding(user)
        assert left.get("database", 0) <= 5, left
        assert left.get("wal", 0) <= 16, left
        assert _redis_holding(redis_dir, user) == 0
        # The bystander keeps everything, in the tables and in Redis's files.
        assert "database" in files.holding(kept)
        assert _redis_holding(redis_dir, kept)


async def test_with_wal_recycle_on_the_receipt_says_the_database_is_not_proven_purged(
    pg_databases: Callable[[], Awaitable[str]],
    persistent_redis: tuple[str, Path],
    start_app: Callable[[Settings], Any],
) -> None:
    """Recycled segments keep their bytes under a new name: the tables are rewritten (no
    marker in them), but the receipt says false, naming the setting."""
    redis_url, _ = persistent_redis
    dsn = await pg_databases()
    files = await ServerFiles.of(dsn)
    tag = uuid.uuid4().hex[:10]
    user = f"erasee-{tag}"
    async with (
        _wal_recycle("on"),
        start_app(full_settings(dsn, redis_url=redis_url)) as running,
    ):
        await _fill(running, user, f"bystander-{tag}", tag)
        receipt = await _erase(running, user)
    purged = receipt["purged_from_disk"]
    assert purged["database"] is False
    assert "wal_recycle" in purged["notes"]["database"], purged
    assert purged["buffer"] is True
    assert "database" not in files.holding(f"ZQMARK{tag}")


async def test_the_purge_can_be_turned_off(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[[Settings], Any]
) -> None:
    settings = full_settings(await pg_databases(), erasure_purge_database=False)
    async with start_app(settings) as running:
        tag = uuid.uuid4().hex[:10]
        await post_messages(running, f"s-{tag}", f"u-{tag}", [turn("I like plums.")])
        # The answer of a DELETE that waited for the job: the receipt's schema.
        answer = await running.client.delete(f"/v1/users/u-{tag}")
    assert answer.status_code == 200, answer.text
    purged = answer.json()["purged_from_disk"]
    assert purged["database"] is False
    assert "STRATA_ERASURE_PURGE_DATABASE" in purged["notes"]["database"]
    assert purged["notes"]["buffer"] is None


async def test_a_purge_held_up_on_the_last_attempt_leaves_its_reason_in_the_receipt(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[[Settings], Any]
) -> None:
    """A transaction older than the deletes (a backup's, say) outlasts every attempt: the
    erasure still succeeds, its receipt saying why the database is not purged."""
    settings = full_settings(
        await pg_databases(), erasure_purge_wait_seconds=0.5, job_max_attempts=1
    )
    holder = await asyncpg.connect((await pg_databases()).replace("+asyncpg", ""))
    try:
        async with start_app(settings) as running:
            tag = uuid.uuid4().hex[:10]
            await post_messages(running, f"s-{tag}", f"u-{tag}", [turn("I like plums.")])
            await holder.execute("BEGIN")
            await holder.fetchval("SELECT txid_current()")
            purged = (await _erase(running, f"u-{tag}"))["purged_from_disk"]
    finally:
        await holder.close()
    assert purged["database"] is False
    assert "older than the erasure" in purged["notes"]["database"], purged


async def test_the_start_warns_naming_the_setting_that_keeps_the_purge_unproven(
    pg_databases: Callable[[], Awaitable[str]], caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(create_engine(await pg_databases()))
    try:
        async with _wal_recycle("on"):
            with caplog.at_level(logging.WARNING, logger="strata"):
                await _warn_purge_blockers(db)
        async with _wal_recycle("off"):
            assert await db.purge_blockers() == []  # the rest of this server allows it
    finally:
        await db.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "purged_from_disk.database false" in warnings[0]
    assert "set wal_recycle = off" in warnings[0]


@pytest.mark.parametrize("where", ["snapshot here", "transaction elsewhere"])
async def test_a_purge_waits_for_an_older_transaction_and_lets_go_in_time(
    pg_databases: Callable[[], Awaitable[str]], where: str
) -> None:
    """A snapshot older than the deletes would have VACUUM FULL copy the deleted rows into
    the new files: one in the database, or any transaction of the server (VACUUM FULL's own
    snapshot starts at it). The purge waits for it, and gives up (the job retries) rather
    than wait forever."""
    dsn = await pg_databases()
    holder_dsn = dsn if where == "snapshot here" else await pg_databases()
    db = Database(create_engine(dsn))
    holder = await asyncpg.connect(holder_dsn.replace("+asyncpg", ""))
    try:
        async with db.transaction() as tx:
            await tx.execute(sa.text("CREATE TABLE held (note text)"))
            await tx.execute(sa.text("INSERT INTO held SELECT 'gone' FROM generate_series(1, 9)"))
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await holder.fetchval("SELECT txid_current()")  # its snapshot, and an id of its own
        async with db.transaction() as tx:
            await tx.execute(sa.text("DELETE FROM held"))
        with pytest.raises(DatabaseUnavailable, match="older than the erasure"):
            await db.purge(["held"], wait_seconds=0.5)
        await holder.execute("ROLLBACK")
        purged = await db.purge(["held"], wait_seconds=30)
        # Done, or not proven for the WAL alone (wal_recycle on, the machine's default).
        assert purged.done or "the WAL is not proven" in (purged.reason or ""), purged
    finally:
        await holder.close()
        await db.close()


@pytest.mark.parametrize(
    ("args", "done", "reason"),
    [
        (("--save", "", "--appendonly", "no"), True, None),
        (("--save", "3600 1", "--rename-command", "CONFIG", ""), False, "CONFIG"),
    ],
    ids=["persistence-off", "config-refused"],
)
async def test_redis_purge_without_files_or_without_config(
    tmp_path: Path, args: tuple[str, ...], done: bool, reason: str | None
) -> None:
    async with _redis_server(tmp_path, *args) as url:
        redis = Redis.from_url(url)
        try:
            purged = await Buffer(redis, window=10, ttl_seconds=60).purge(30)
        finally:
            await redis.aclose()
    assert purged.done is done
    assert (reason is None) == (purged.reason is None)
    if reason is not None:
        assert reason in (purged.reason or "")
