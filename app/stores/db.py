"""The SQL engine: PostgreSQL through asyncpg, or one SQLite file when embedded.

SQLite runs in WAL mode with two engines: writes begin IMMEDIATE (the embedded service has
many concurrent writers in one process, and a deferred transaction that upgrades to a write
lock fails at once with "database is locked" instead of waiting its turn), while reads go
through a second engine that never takes the write lock, so recall and context never queue
behind promotion's writes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
ALEMBIC_INI = MIGRATIONS_DIR.parent / "alembic.ini"


def _ensure_sqlite_dir(dsn: str) -> None:
    path = dsn.split("///", 1)[1] if "///" in dsn else ""
    if dsn.startswith("sqlite") and path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def create_engine(dsn: str, *, readonly: bool = False) -> AsyncEngine:
    if dsn.startswith("sqlite"):
        _ensure_sqlite_dir(dsn)
        engine = create_async_engine(dsn, connect_args={"timeout": 30})
        _tune_sqlite(engine, readonly=readonly)
        return engine
    return create_async_engine(dsn, pool_size=10, max_overflow=10, pool_pre_ping=True)


def _tune_sqlite(engine: AsyncEngine, *, readonly: bool) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
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


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


def alembic_config(dsn: str) -> Config:
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["url"] = dsn
    cfg.attributes["configure_logger"] = False
    return cfg


async def migrate(dsn: str, revision: str = "head") -> None:
    """Upgrade the schema; Alembic's env runs its own event loop, so it gets a thread."""
    _ensure_sqlite_dir(dsn)
    await asyncio.to_thread(command.upgrade, alembic_config(dsn), revision)


async def ping(engine: AsyncEngine) -> float:
    start = time.perf_counter()
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
    return (time.perf_counter() - start) * 1000


class Database:
    """The canonical store's handle: the engine plus a way to run one transaction.

    Services open the transaction so that the durability order of DESIGN §1 (commit the
    log, then touch Redis or Qdrant) is visible where it matters; every statement inside it
    lives in a repository module next to this one.
    """

    def __init__(self, engine: AsyncEngine, reader: AsyncEngine | None = None) -> None:
        self.engine = engine
        self.reader = reader or engine
        self._sessions = session_factory(engine)
        self._reads = session_factory(self.reader)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def transaction(self) -> _Transaction:
        """A read-write transaction."""
        return _Transaction(self._sessions)

    def read(self) -> _Transaction:
        """Reads (on SQLite in autocommit, each statement its own snapshot, never waiting
        for the write lock; on PostgreSQL a read-committed transaction)."""
        return _Transaction(self._reads)

    async def ping(self) -> float:
        # Through the reader: on SQLite a write-lock wait behind promotion is not an outage.
        return await ping(self.reader)

    async def close(self) -> None:
        await self.engine.dispose()
        if self.reader is not self.engine:
            await self.reader.dispose()


class _Transaction:
    def __init__(self, factory: async_sessionmaker[AsyncSession]) -> None:
        self._factory = factory
        self._session: AsyncSession | None = None

    async def __aenter__(self) -> AsyncSession:
        self._session = self._factory()
        await self._session.begin()
        return self._session

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        assert self._session is not None
        try:
            if exc_type is None:
                await self._session.commit()
            else:
                await self._session.rollback()
        finally:
            await self._session.close()
