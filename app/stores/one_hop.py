"""SQLite writes in one hop: a whole short transaction run on a thread of its own.

Through SQLAlchemy and aiosqlite every statement is a hop to the driver's thread and back
to the event loop: a one-message ingest took six (BEGIN, the session's advance, the user's
erasure check, the insert, COMMIT, the pool's reset), and with the in-process worker
keeping the loop busy each return waited its turn, so the request's p99 was ten times its
p50 while it held SQLite's one writer (bench/README.md, "Ingest, promotion, memory"). Here
the transaction's statements run back to back on one thread, with a connection of its own,
and the loop is met once. `Database.write_in_one` takes the process's writer lock first,
so these writes take turns with every other writer as before.

The statements are the stores' own SQLAlchemy constructs, compiled once for SQLite
(`Prepared`): the SQL and each value's conversion (datetimes, JSON) are what the ORM path
sends, so rows written either way read back the same (tests/integration/test_ingest.py).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from sqlalchemy.dialects import sqlite
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

T = TypeVar("T")

_DIALECT = sqlite.dialect()

# As the engines' connections are tuned (app/stores/db.py): WAL, and SQLite's own busy
# time-out as the writer lock's wait (another process on the same file).
PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA busy_timeout=30000",
)


class Prepared:
    """A statement compiled once for SQLite's own driver: its SQL with `?` placeholders,
    and each value converted as SQLAlchemy binds it (`column_keys`: an insert's columns)."""

    def __init__(self, statement: ClauseElement, column_keys: Sequence[str] | None = None) -> None:
        keys = list(column_keys) if column_keys else None
        compiled = cast(SQLCompiler, statement.compile(dialect=_DIALECT, column_keys=keys))
        self.sql = str(compiled)
        names = list(compiled.positiontup or ())
        self._names = names
        # The type as SQLite's dialect adapts it: the generic DateTime binds a datetime
        # as Python prints it (no ".000000" when its microseconds are 0), SQLite's as text
        # of one fixed form, which is what stored rows hold and are compared as.
        self._convert = [
            compiled.binds[n].type.dialect_impl(_DIALECT).bind_processor(_DIALECT) for n in names
        ]

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        # None goes through the conversion too: JSON binds it as 'null', as SQLAlchemy does.
        pairs = zip(self._names, self._convert, strict=True)
        return tuple(values[n] if convert is None else convert(values[n]) for n, convert in pairs)

    def position(self, name: str) -> int:
        """Where the value of `name` is in `params`' tuple."""
        return self._names.index(name)

    def run(self, conn: sqlite3.Connection, values: Mapping[str, Any]) -> sqlite3.Cursor:
        return conn.execute(self.sql, self.params(values))


class Unwritten(Exception):
    """Raised by a one-hop write's work to roll it back: nothing it did is kept."""


class OneHopWriter:
    """A thread and a SQLite connection of its own, for `Database.write_in_one`. Opened at
    the first write, closed by the database that made it (and opened again, on a new
    thread, if written to after). The connection belongs to the thread that opened it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()  # the pool thread's connection

    def executor(self) -> ThreadPoolExecutor:
        with self._mutex:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="strata-sqlite-writer")
            return self._pool

    def transact(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """On the writer's thread: `work` in one transaction, committed, or rolled back
        when it raises (None for `Unwritten`, anything else raised again). A failed COMMIT
        (busy, disk full) is rolled back too: the connection must not keep the write lock.
        A connection that cannot even roll back is closed, for a fresh one next time."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = work(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                self._drop_connection()
            if isinstance(exc, Unwritten):
                return None
            raise
        return out

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            for pragma in PRAGMAS:
                conn.execute(pragma)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close the connection on its thread and let the thread go. Under the mutex: a
        write asking meanwhile gets a new thread (and connection) only after."""
        with self._mutex:
            pool, self._pool = self._pool, None
            if pool is None:
                return
            pool.submit(self._drop_connection).result()
            pool.shutdown(wait=True)
