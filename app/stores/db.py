"""The SQL engine: PostgreSQL through asyncpg, or one SQLite file when embedded.

SQLite runs in WAL mode with two engines: writes begin IMMEDIATE (the embedded service has
many concurrent writers in one process, and a deferred transaction that upgrades to a write
lock fails at once with "database is locked" instead of waiting its turn), while reads go
through a second engine that never takes the write lock, so recall and context never queue
behind promotion's writes. The process's writers also take turns on an asyncio lock before
their BEGIN: SQLite's own wait for a held write lock is its busy handler, which sleeps in
steps of 1, 2, 5, 10, 15, 20, 25 ms, so a one-message ingest behind a promotion pass of a
few milliseconds woke tens of milliseconds later (the p99 of one-message ingest); the lock
hands the writer over the moment the last one commits. It is a `TurnLock`
(app/stores/loops.py): the worker's thread, on an event loop and engines of its own
(`Database.sibling`), takes its turns on the same lock. Other processes on the same file
still meet the busy handler.

The transaction is also the boundary where the drivers' failures become the service's:
an outage, a dropped connection or a transient abort leaves as `DatabaseUnavailable` (503,
retry later); a statement the database refused is our bug and leaves unchanged (500).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from app.errors import DatabaseUnavailable
from app.stores import changes, one_hop, pg_purge
from app.stores.loops import TurnLock
from app.stores.purged import Purged

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger("strata.db")

T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
ALEMBIC_INI = MIGRATIONS_DIR.parent / "alembic.ini"
# The newest migration (tests/unit/test_migration_head.py checks that it is Alembic's head):
# a database already there is left without importing Alembic, ~21 MiB a process keeps.
HEAD_REVISION = "2026_12_07_user_keys"


def _ensure_sqlite_dir(dsn: str) -> None:
    path = dsn.split("///", 1)[1] if "///" in dsn else ""
    if dsn.startswith("sqlite") and path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def create_engine(
    dsn: str, *, readonly: bool = False, lock_timeout_seconds: float = 0
) -> AsyncEngine:
    """`lock_timeout_seconds` (PostgreSQL; 0: none) bounds a wait for a row lock: a request
    behind a transaction that hangs fails as retryable instead of waiting with it."""
    if dsn.startswith("sqlite"):
        _ensure_sqlite_dir(dsn)
        engine = create_async_engine(dsn, connect_args={"timeout": 30})
        _tune_sqlite(engine, readonly=readonly)
        return engine
    connect_args: dict[str, Any] = {}
    if lock_timeout_seconds:
        lock_timeout = f"{max(1, round(lock_timeout_seconds * 1000))}ms"
        connect_args["server_settings"] = {"lock_timeout": lock_timeout}
    return create_async_engine(
        dsn, pool_size=10, max_overflow=10, pool_pre_ping=True, connect_args=connect_args
    )


def _tune_sqlite(engine: AsyncEngine, *, readonly: bool) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        for pragma in one_hop.PRAGMAS:
            cur.execute(pragma)
        if readonly:
            cur.execute("PRAGMA query_only=ON")
        cur.close()

    if readonly:
        # Reads run in autocommit: each statement sees a consistent WAL snapshot, takes no
        # lock a writer waits on, and costs no BEGIN/COMMIT round trips to the driver thread.
        return

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class WatchedSession(Session):
    """Every session records which users its writes may have changed for context's cached
    reads (`app.stores.changes`); a read-only one records nothing, at a few µs a
    statement, and a write sent through `read()` by mistake is still seen."""


changes.watch(WatchedSession)

# Told, after each commit, which users its writes touched (`changes.Scope`). Should not
# raise: what it raises is logged, and the committed write answered as it was.
CommitHook = Callable[[set[changes.Scope]], Awaitable[None]]


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(
        engine, expire_on_commit=False, autoflush=False, sync_session_class=WatchedSession
    )


def alembic_config(dsn: str) -> Config:
    from alembic.config import Config

    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["url"] = dsn
    cfg.attributes["configure_logger"] = False
    return cfg


async def migrate(dsn: str, revision: str = "head") -> None:
    """Upgrade the schema; Alembic's env runs its own event loop, so it gets a thread. A
    database at the newest revision already (every start but the first) is only read."""
    _ensure_sqlite_dir(dsn)
    if revision == "head" and await current_revisions(dsn) == [HEAD_REVISION]:
        return
    from alembic import command

    await asyncio.to_thread(command.upgrade, alembic_config(dsn), revision)


async def current_revisions(dsn: str) -> list[str]:
    """The revisions Alembic recorded in the database; none for a new database."""
    engine = create_async_engine(dsn, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.text("SELECT version_num FROM alembic_version"))
            return sorted(str(r[0]) for r in rows)
    except (DBAPIError, OSError):  # no table yet, or no database: Alembic runs, and says so
        return []
    finally:
        await engine.dispose()


async def ping(engine: AsyncEngine) -> float:
    start = time.perf_counter()
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
    return (time.perf_counter() - start) * 1000


class Database:
    """The canonical store's handle: the engine plus a way to run one transaction.

    Services open the transaction so that the durability order of docs/architecture.md §2
    (commit the log, then touch Redis or Qdrant) is visible where it matters; every statement
    inside it lives in a repository module next to this one.
    """

    def __init__(self, engine: AsyncEngine, reader: AsyncEngine | None = None) -> None:
        self.engine = engine
        self.reader = reader or engine
        self._sessions = session_factory(engine)
        self._reads = session_factory(self.reader)
        self._on_commit: list[CommitHook] = []
        # SQLite has one writer at a time: the process's writers queue here, in order, the
        # api's and its worker thread's alike (`sibling`).
        self._writer = TurnLock() if engine.dialect.name == "sqlite" else None
        # Purges after erasures, one at a time; those asking meanwhile share the next.
        self._purges = _Purges()
        self._one_hop = _one_hop_writer(engine)
        self._owns_one_hop = True  # a sibling shares it; only this one closes it

    def sibling(self, engine: AsyncEngine, reader: AsyncEngine | None = None) -> Database:
        """The same database on engines of another event loop (an engine's pool and its
        connections belong to the loop that opened them): the worker's thread
        (app/worker.py). Its writers take turns with this one's on the one writer lock, its
        purges with this one's, and its commits call the same hooks."""
        other = Database(engine, reader)
        other._on_commit = self._on_commit
        other._writer = self._writer
        other._purges = self._purges
        other._one_hop, other._owns_one_hop = self._one_hop, False
        return other

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def transaction(self) -> _Transaction:
        """A read-write transaction."""
        return _Transaction(self._sessions, self._on_commit, self._writer)

    def read(self) -> _Transaction:
        """Reads (on SQLite in autocommit, each statement its own snapshot, never waiting
        for the write lock; on PostgreSQL a read-committed transaction)."""
        return _Transaction(self._reads, self._on_commit)

    @property
    def writes_in_one(self) -> bool:
        """Whether `write_in_one` is open to this database (a SQLite file)."""
        return self._one_hop is not None

    async def write_in_one(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """SQLite: `work` as one transaction on the writer's own thread and connection, in
        the process's turn of writers (app/stores/one_hop.py). Its result, or None when it
        raised `one_hop.Unwritten` (rolled back). For short writes of tables context does
        not cache (sessions, messages): no commit hook is told (`after_commit`).

        A cancelled caller stops waiting, but the writer's turn passes on only when the
        work is done: the next writer must not begin while this one may still commit."""
        if self._one_hop is None or self._writer is None:
            raise RuntimeError("write_in_one needs a SQLite file")
        writer = self._one_hop
        lock = self._writer
        try:
            async with asyncio.timeout(WRITER_WAIT_SECONDS):
                await lock.acquire()
        except TimeoutError:
            raise DatabaseUnavailable(
                f"the database's writer was busy for {WRITER_WAIT_SECONDS:.0f} s"
            ) from None

        def in_turn() -> T | None:
            # Released on the writer's thread, the moment the work ends: not after a hop
            # back to a loop that may be busy, or closed meanwhile.
            try:
                return writer.transact(work)
            finally:
                lock.release()

        try:
            done = asyncio.get_running_loop().run_in_executor(writer.executor(), in_turn)
        except BaseException:
            lock.release()
            raise
        try:
            return await asyncio.shield(done)
        except (sqlite3.OperationalError, sqlite3.InterfaceError) as exc:  # busy, I/O, full
            raise DatabaseUnavailable(_detail(exc)) from exc

    def after_commit(self, hook: CommitHook) -> None:
        """Call `hook` with the users a committed transaction's writes may have changed
        for context (`app.stores.changes`), after the commit, when there are any."""
        self._on_commit.append(hook)

    @property
    def purges_from_disk(self) -> bool:
        """Whether `purge` always leaves no byte of deleted rows in the database's files
        (SQLite); PostgreSQL's purge proves it or says why not (`app.stores.pg_purge`)."""
        return self.dialect == "sqlite"

    async def purge_blockers(self) -> list[str]:
        """What keeps `purge` from proving the database's files free of deleted rows,
        each naming the setting to change (logged at start); empty on SQLite."""
        if self.dialect == "sqlite":
            return []
        async with self.engine.connect() as conn:
            return await pg_purge.blockers(await _driver(conn))

    async def purge(
        self,
        tables: Sequence[str] = (),
        *,
        lock_timeout_seconds: float = 1.0,
        wait_seconds: float = 60.0,
    ) -> Purged:
        """After an erasure: no byte of deleted rows left in the database's files, proven,
        or why not. Erasures asking while one runs share the next: it starts after each of
        them asked, so after their deletes. PostgreSQL: `tables` rewritten and the WAL
        switched and checkpointed (`app.stores.pg_purge`, its waits bounded by
        `lock_timeout_seconds` and `wait_seconds`). SQLite: the whole file (`tables` unused).
        """
        turns = self._purges
        asked = turns.started + 1
        async with turns.turn:
            if turns.last is not None and turns.done >= asked:
                return turns.last
            turns.started += 1
            number = turns.started
            if self.dialect == "sqlite":
                purged = await self._purge_sqlite()
            else:
                async with self.engine.connect() as conn:
                    purged = await pg_purge.purge(
                        await _driver(conn),
                        tables,
                        lock_timeout_seconds=lock_timeout_seconds,
                        wait_seconds=wait_seconds,
                    )
            turns.done, turns.last = number, purged
            return purged

    async def _purge_sqlite(self) -> Purged:
        """SQLite leaves a deleted row's bytes in its page until reused, and zeroing them
        as they go (`secure_delete`) misses the copies a page split leaves in the free space
        of pages that live on (their other rows are other users'); its write-ahead log holds
        the pages as they were written. So the file is rebuilt (`VACUUM`: every live row
        copied into fresh pages, 0.4 s at 34 MB here, docs/privacy.md), then checkpointed
        and the log truncated to nothing; the process's writers wait meanwhile, readers do
        not. Readers in the middle of a statement hold the log: the checkpoint is tried
        again until they are done."""
        assert self._writer is not None
        deadline = time.monotonic() + WRITER_WAIT_SECONDS
        vacuumed = False
        while True:
            async with self._writer, self.engine.connect() as conn:
                driver = await _driver(conn)
                if not vacuumed:
                    await driver.execute("VACUUM")
                    vacuumed = True
                cursor = await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                busy, _, _ = await cursor.fetchone()
                await cursor.close()
            if not busy:
                return Purged(True)
            if time.monotonic() > deadline:
                raise DatabaseUnavailable("the database's log could not be emptied: readers")
            await asyncio.sleep(0.05)

    async def ping(self) -> float:
        # Through the reader: on SQLite a write-lock wait behind promotion is not an outage.
        return await ping(self.reader)

    async def close(self) -> None:
        if self._one_hop is not None and self._owns_one_hop:
            await asyncio.to_thread(self._one_hop.close)
        await self.engine.dispose()
        if self.reader is not self.engine:
            await self.reader.dispose()


def _one_hop_writer(engine: AsyncEngine) -> one_hop.OneHopWriter | None:
    """The one-hop writer of a SQLite file; none for PostgreSQL, nor for an in-memory
    database (a second connection would open another one)."""
    path = engine.url.database
    if engine.dialect.name != "sqlite" or not path or path == ":memory:":
        return None
    if path.startswith("file:") or engine.url.query:
        return None  # a URI or driver options: the engines' own, not repeated here
    return one_hop.OneHopWriter(path)


async def _driver(conn: AsyncConnection) -> Any:
    """The driver's own connection (aiosqlite's or asyncpg's), outside any transaction:
    `VACUUM` cannot run in one."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    return driver


class _Purges:
    """The purges of a database and its siblings, one at a time (`Database.purge`)."""

    def __init__(self) -> None:
        self.turn = TurnLock()
        self.started = self.done = 0
        self.last: Purged | None = None


# How long a write waits for the process's SQLite writer (SQLite's busy time-out is the same).
WRITER_WAIT_SECONDS = 30.0


class _Transaction:
    def __init__(
        self,
        factory: async_sessionmaker[AsyncSession],
        on_commit: list[CommitHook] | None = None,
        writer: TurnLock | None = None,
    ) -> None:
        self._factory = factory
        self._on_commit = on_commit if on_commit is not None else []  # the Database's own
        self._writer = writer  # SQLite's writers take turns on it (the module's docstring)
        self._held = False
        self._session: AsyncSession | None = None

    async def __aenter__(self) -> AsyncSession:
        if self._writer is not None:
            try:
                async with asyncio.timeout(WRITER_WAIT_SECONDS):
                    await self._writer.acquire()
                self._held = True
            except TimeoutError:
                # As SQLite's own busy time-out would have ended it: retry later.
                raise DatabaseUnavailable(
                    f"the database's writer was busy for {WRITER_WAIT_SECONDS:.0f} s"
                ) from None
        self._session = self._factory()
        try:
            await self._session.begin()
        except BaseException as exc:  # a cancellation too: the writer's turn must pass on
            try:
                await self._session.close()
            finally:
                self._release()
            if isinstance(exc, Exception) and (unavailable := _outage(exc)) is not None:
                raise unavailable from exc
            raise
        return self._session

    async def _announce(self, touched: set[changes.Scope]) -> None:
        for hook in self._on_commit:
            try:
                # Shielded: a request cancelled now still announces what it committed.
                await asyncio.shield(hook(touched))
            except Exception:  # the write is committed: it must not be reported failed
                log.exception("after-commit hook %r failed", hook)

    def _release(self) -> None:
        if self._held and self._writer is not None:
            self._held = False
            self._writer.release()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        assert self._session is not None
        committing = False  # a commit that failed may still have landed: announce it too
        touched: set[changes.Scope] = set()
        try:
            try:
                if exc is None:
                    committing = True
                    await self._session.commit()
                else:
                    await self._session.rollback()
            except Exception as failure:
                if exc is None:
                    if (unavailable := _outage(failure)) is not None:
                        raise unavailable from failure
                    raise
                # The rollback of a broken connection may fail too; the first error is the
                # news.
                log.warning("rollback failed after %s: %r", type(exc).__name__, failure)
            finally:
                touched = changes.taken(self._session.sync_session)
                try:
                    await self._session.close()
                finally:
                    self._release()
        finally:
            if committing and touched:
                await self._announce(touched)
            if exc is not None and not isinstance(exc, Exception):
                _let_go(_tb)  # a cancellation
        if isinstance(exc, Exception) and (unavailable := _outage(exc)) is not None:
            raise unavailable from exc


def _let_go(tb: TracebackType | None) -> None:
    """After a transaction cancelled mid-statement: drop what the traceback's finished
    frames hold. They hold the driver's cursor, its statement unfinished; SQLAlchemy closes
    the connection, and SQLite keeps a connection closed with a statement unfinished open,
    its transaction and locks with it, until the statement is freed, and the cancelled task
    keeps the traceback as long as the task is kept (a flusher, a job's future). After one
    cancelled write every later write of the process waited out the busy time-out (30 s)
    and failed (tests/integration/test_db_cancel.py); a read kept so would hold back the
    WAL's checkpoints. The frames still running are left alone."""
    if tb is not None:
        traceback.clear_frames(tb)


def _outage(exc: BaseException) -> DatabaseUnavailable | None:
    """The service's error for a database failure a retry may cure, or None when `exc`
    is not one (a statement refused for our bug, or an error that is not the database's)."""
    if isinstance(exc, DBAPIError):
        refused = (
            not isinstance(exc, OperationalError | InterfaceError)
            and not exc.connection_invalidated
            and exc.statement is not None
            and not _transient(exc)
        )
        return None if refused else DatabaseUnavailable(_detail(exc))
    if isinstance(exc, PoolTimeout):  # every pooled connection busy for `pool_timeout`
        return DatabaseUnavailable(_detail(exc))
    if isinstance(exc, OSError) and _from_driver(exc):
        # Refused or reset connections, name resolution, connect time-outs: asyncpg raises
        # the socket's own errors, and SQLAlchemy lets them through unwrapped.
        return DatabaseUnavailable(_detail(exc))
    return None


def _transient(exc: DBAPIError) -> bool:
    """Deadlock or serialisation (40), statement timeout or shutdown (57), connection (08),
    a lock not had within `lock_timeout` (55P03): the request may succeed if retried, so it
    is a 503, not our 500."""
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return isinstance(code, str) and (code[:2] in ("40", "57", "08") or code == "55P03")


_DRIVERS = frozenset({"sqlalchemy", "asyncpg", "aiosqlite", "sqlite3"})


def _from_driver(exc: BaseException) -> bool:
    """Whether `exc` was raised in (or passed through) the database's client code, rather
    than in ours or in another store's inside the same transaction."""
    tb = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.partition(".")[0] in _DRIVERS:
            return True
        tb = tb.tb_next
    return False


def _detail(exc: BaseException) -> str:
    # The class only: a driver's message may carry host names or SQL.
    return f"the database failed ({type(exc).__name__})"
