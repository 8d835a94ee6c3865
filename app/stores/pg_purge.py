"""PostgreSQL's files purged of the rows an erasure deleted (docs/privacy.md, "What stays on
disk").

A deleted row stays in its page, also after a plain `VACUUM`, and in the WAL that logged the
delete (the page's full-page image too), measured. So the tables that held the user's rows
are rewritten from their live rows (`VACUUM FULL`, which also rewrites their TOAST and
indexes), then the WAL is switched to a new segment and checkpointed: the segments before
the switch are deleted then, unless the server keeps them (`blockers`), which `pg_wal`
itself is checked for. A snapshot older than the deletes would have `VACUUM FULL` copy the
deleted rows into the new files (measured: one transaction open in another database of
the server, which VACUUM FULL's own snapshot starts at, kept all 120 deleted rows of a
table in its new file): the purge waits for every such snapshot and transaction to end.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.errors import DatabaseUnavailable
from app.stores.purged import Purged

if TYPE_CHECKING:  # the driver is imported by SQLAlchemy when PostgreSQL is used
    from asyncpg import Connection

_SEGMENT = re.compile(r"^[0-9A-F]{24}$")
_XID_MODULO = 1 << 32
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out

# What keeps WAL segments (or copies of them) the checkpoint would otherwise delete.
_SETTINGS = """
SELECT current_setting('wal_recycle') AS recycle,
       current_setting('archive_mode') AS archive,
       pg_size_bytes(current_setting('wal_keep_size')) AS keep,
       (SELECT count(*) FROM pg_replication_slots) AS slots,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       OR CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pg_checkpoint')
               THEN pg_has_role('pg_checkpoint', 'member')
                    AND pg_has_role('pg_monitor', 'member')
                    AND has_function_privilege('pg_switch_wal()', 'execute')
               ELSE false END AS allowed
"""

# What VACUUM's horizon for this database's tables counts: its backends' snapshots (and those
# of no database: WAL senders with hot_standby_feedback), every running transaction of the
# server (VACUUM FULL's own snapshot starts at the oldest of them, whatever its database),
# prepared transactions, the replication slots'.
_HOLDERS = """
SELECT pid,
       CASE WHEN datid IS NULL OR datname = current_database() THEN backend_xmin::text END
         AS xmin,
       backend_xid::text AS xid
  FROM pg_stat_activity
 WHERE pid <> pg_backend_pid() AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
UNION ALL
SELECT NULL, NULL, transaction::text FROM pg_prepared_xacts
UNION ALL
SELECT NULL, xmin::text, catalog_xmin::text FROM pg_replication_slots
 WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
"""


async def blockers(pg: Connection[Any]) -> list[str]:
    """Why the purge cannot prove the WAL free of deleted rows, each naming the setting or
    grant to change; empty when nothing stands in the way."""
    row = await pg.fetchrow(_SETTINGS)
    assert row is not None
    reasons = []
    if row["recycle"] == "on":
        reasons.append(
            "wal_recycle is on: old WAL segments are renamed for reuse with their bytes "
            "(set wal_recycle = off)"
        )
    if row["archive"] != "off":
        reasons.append(
            f"archive_mode is {row['archive']}: segments wait for the archive, which keeps "
            "copies (the operator's to purge; archive_mode = off lets the service prove it)"
        )
    if row["keep"]:
        reasons.append("wal_keep_size is above 0: old segments are kept (set it to 0)")
    if row["slots"]:
        reasons.append(f"{row['slots']} replication slot(s) hold old segments")
    if not row["allowed"]:
        reasons.append(
            "the database role may not switch and checkpoint the WAL or list pg_wal "
            "(make it superuser, or grant it pg_checkpoint, pg_monitor and EXECUTE on "
            "pg_switch_wal())"
        )
    return reasons


async def purge(
    pg: Connection[Any],
    tables: Sequence[str],
    *,
    lock_timeout_seconds: float,
    wait_seconds: float,
) -> Purged:
    """`VACUUM FULL` each of `tables`, then the WAL; raises `DatabaseUnavailable` (the job
    retries) when an older transaction or a table's lock is not let go within
    `wait_seconds`. Each table's lock is waited for `lock_timeout_seconds` at a time, for
    every request touching the table queues behind a `VACUUM FULL` waiting for it."""
    deadline = time.monotonic() + wait_seconds
    await _outlive_older_snapshots(pg, deadline)
    await pg.execute(f"SET lock_timeout = '{max(1, round(lock_timeout_seconds * 1000))}ms'")
    try:
        for table in tables:
            await _vacuum_full(pg, table, deadline)
    finally:
        await pg.execute("RESET lock_timeout")
    reasons = await blockers(pg)
    if reasons:
        return Purged(False, "tables rewritten; the WAL is not proven: " + "; ".join(reasons))
    switched = await pg.fetchval("SELECT pg_walfile_name(pg_switch_wal())")
    await pg.execute("CHECKPOINT")
    names = [row["name"] for row in await pg.fetch("SELECT name FROM pg_ls_waldir()")]
    older = sorted(n for n in names if _SEGMENT.match(n) and n[8:] <= switched[8:])
    if older:
        return Purged(
            False,
            f"tables rewritten; {len(older)} WAL segment(s) from before the purge are still "
            f"in pg_wal (the oldest {older[0]})",
        )
    return Purged(True)


async def _outlive_older_snapshots(pg: Connection[Any], deadline: float) -> None:
    # Every delete of the erasure committed before this transaction id was given out.
    horizon = int(await pg.fetchval("SELECT txid_current()")) % _XID_MODULO
    while True:
        held = [
            row["pid"]
            for row in await pg.fetch(_HOLDERS)
            if any(_precedes(int(x), horizon) for x in (row["xmin"], row["xid"]) if x)
        ]
        if not held:
            return
        if time.monotonic() > deadline:
            who = f"pid {held[0]}" if held[0] is not None else "a prepared xact or a slot"
            raise DatabaseUnavailable(
                f"a transaction older than the erasure's deletes is still open ({who}): "
                "its snapshot would keep them through VACUUM FULL"
            )
        await asyncio.sleep(0.1)


def _precedes(xid: int, horizon: int) -> bool:
    """Transaction ids wrap around: `xid` is older when it is less than 2^31 behind."""
    return (xid - horizon) % _XID_MODULO >= 1 << 31


async def _vacuum_full(pg: Connection[Any], table: str, deadline: float) -> None:
    while True:
        try:
            await pg.execute(f'VACUUM FULL "{table}"')
            return
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                raise
            if time.monotonic() > deadline:
                raise DatabaseUnavailable(
                    f"VACUUM FULL of {table} did not get its lock: a long transaction holds it"
                ) from None
            await asyncio.sleep(0.5)
