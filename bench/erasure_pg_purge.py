"""What PostgreSQL's purge after an erasure costs (docs/privacy.md, "What stays on disk"):
`VACUUM FULL messages` at a given number of rows, and how long a request touching the table
waits meanwhile (a one-row read issued just after the rewrite starts).

A fresh database per size, migrated, its `messages` filled by SQL (300-character turns,
100 per session, 10 sessions per user); 1% of them deleted first, as an erasure would.
The database is dropped at the end.

Usage: python bench/erasure_pg_purge.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres]
       [--rows 100000 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.stores.db import migrate

FILL = """
INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', now());
INSERT INTO users (tenant_id, id, profile, max_access_count, created_at)
SELECT 't', 'u' || u, '{}', 0, now() FROM generate_series(0, $1 / 1000) u;
INSERT INTO sessions (tenant_id, user_id, id, metadata, last_seq, indexed_seq, created_at,
                      updated_at)
SELECT 't', 'u' || (s / 10), 's' || s, '{}', 100, 100, now(), now()
  FROM generate_series(0, $1 / 100) s;
INSERT INTO messages (tenant_id, user_id, session_id, seq, role, content, metadata,
                      created_at, received_at)
SELECT 't', 'u' || (i / 1000), 's' || (i / 100), i % 100, 'user',
       'turn ' || i || ' ' || repeat(md5(i::text), 9), '{}', now(), now()
  FROM generate_series(0, $1 - 1) i;
DELETE FROM messages WHERE user_id IN (SELECT 'u' || u FROM generate_series(0, $1 / 1000, 100) u);
"""


async def measure(admin_dsn: str, rows: int) -> dict[str, float]:
    name = f"strata_purge_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{admin_dsn.rsplit('/', 1)[0]}/{name}"
    try:
        await migrate(dsn.replace("postgresql://", "postgresql+asyncpg://", 1))
        conn = await asyncpg.connect(dsn)
        probe = await asyncpg.connect(dsn)
        try:
            # One statement per call: asyncpg's execute with arguments takes one.
            for statement in filter(str.strip, FILL.split(";")):
                if "$1" in statement:
                    await conn.execute(statement, rows)
                else:
                    await conn.execute(statement)
            await conn.execute("VACUUM ANALYZE messages")
            size = await conn.fetchval("SELECT pg_total_relation_size('messages')")
            start = time.perf_counter()
            vacuum = asyncio.create_task(conn.execute("VACUUM FULL messages"))
            await asyncio.sleep(0.05)  # the rewrite holds its lock by now
            asked = time.perf_counter()
            await probe.fetchval("SELECT content FROM messages WHERE user_id = 'u1' LIMIT 1")
            waited = time.perf_counter() - asked
            await vacuum
            took = time.perf_counter() - start
        finally:
            await conn.close()
            await probe.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return {"rows": rows, "mb": size / 2**20, "vacuum_full_s": took, "read_waited_s": waited}


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    args = parser.parse_args(argv)
    for rows in args.rows:
        result = await measure(args.dsn, rows)
        print(
            f"messages {result['rows']:>9,} rows, {result['mb']:7.1f} MB with indexes: "
            f"VACUUM FULL {result['vacuum_full_s']:.2f} s, "
            f"a read of the table waited {result['read_waited_s']:.2f} s"
        )


if __name__ == "__main__":
    asyncio.run(main())
