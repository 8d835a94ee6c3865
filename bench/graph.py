"""Knowledge-graph neighbour latency at depth 1–3 (docs/facts.md), on PostgreSQL or SQLite.

Builds a synthetic graph per user (entities with a heavy-tailed degree: a few hubs, many
leaves, as people's graphs are — "user" knows everyone), spread over several users so the
user scope is exercised, then times `GraphService.neighbors` (the bounded recursive CTE and
the relations among the reached nodes) from random start entities at each depth.

    .venv/bin/python bench/graph.py --pg postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/graph.py --sqlite /tmp/graph-bench.db

With `--pg`, a fresh database is created and dropped afterwards. Output: a table and
bench/results/graph.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from benchlib import machine_facts, print_machine, summarize, write_json

from app.core.graph import name_key
from app.services.graph import GraphService
from app.stores.db import Database, create_engine, migrate
from app.stores.models import Entity, Relation

TENANT = "bench"
PREDICATES = ("knows", "lives_in", "works_at", "likes", "sister", "visited", "part_of")


def build_graph(
    rng: random.Random, user: str, entities: int, relations: int, now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Entities and relations of one user: preferential attachment (a new edge's end is
    drawn from the ends of earlier edges half the time), so degrees are heavy-tailed.
    One relation in ten has ended (valid_to in the past), as superseded facts leave."""
    ids = [uuid.uuid4() for _ in range(entities)]
    names = ["user", *(f"entity {i}" for i in range(1, entities))]
    ents = [
        {
            "id": ids[i],
            "tenant_id": TENANT,
            "user_id": user,
            "name": names[i],
            "name_key": name_key(names[i]),
            "entity_type": None,
            "learned_at": now,
            "updated_at": now,
        }
        for i in range(entities)
    ]
    ends: list[int] = [0]
    rels = []
    for n in range(relations):
        a = rng.choice(ends) if rng.random() < 0.5 else rng.randrange(entities)
        b = rng.randrange(entities)
        if a == b:
            b = (b + 1) % entities
        ends += [a, b]
        ended = n % 10 == 0
        rels.append(
            {
                "id": uuid.uuid4(),
                "tenant_id": TENANT,
                "user_id": user,
                "subject_id": ids[a],
                "predicate": rng.choice(PREDICATES),
                "object_id": ids[b],
                "valid_from": now - timedelta(days=400),
                "valid_to": now - timedelta(days=10) if ended else None,
                "learned_at": now,
                "retracted_at": None,
                "memory_id": None,
                "sources": [],
            }
        )
    return ents, rels


async def load(db: Database, users: Sequence[str], args: argparse.Namespace) -> dict[str, int]:
    rng = random.Random(args.seed)
    now = datetime.now(UTC)
    counts = {"entities": 0, "relations": 0}
    for user in users:
        ents, rels = build_graph(rng, user, args.entities, args.relations, now)
        async with db.transaction() as tx:
            for start in range(0, len(ents), 2000):
                await tx.execute(sa.insert(Entity), ents[start : start + 2000])
            for start in range(0, len(rels), 2000):
                await tx.execute(sa.insert(Relation), rels[start : start + 2000])
        counts["entities"] += len(ents)
        counts["relations"] += len(rels)
    if db.dialect == "postgresql":
        async with db.transaction() as tx:
            await tx.execute(sa.text("ANALYZE entities"))
            await tx.execute(sa.text("ANALYZE relations"))
    return counts


async def measure(
    service: GraphService, users: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    rng = random.Random(args.seed + 1)
    out: dict[str, Any] = {}
    for depth in (1, 2, 3):
        times: list[float] = []
        nodes: list[float] = []
        edges: list[float] = []
        for i in range(args.warmup + args.queries):
            user = rng.choice(users)
            # Half from the hub ("user"), half from a random entity.
            entity = "user" if i % 2 == 0 else f"entity {rng.randrange(1, args.entities)}"
            started = time.perf_counter()
            hood = await service.neighbors(TENANT, user, entity, depth=depth, as_of=None)
            elapsed = (time.perf_counter() - started) * 1000
            if i >= args.warmup:
                times.append(elapsed)
                nodes.append(len(hood.nodes))
                edges.append(len(hood.relations))
        out[f"depth_{depth}"] = {
            "ms": summarize(times),
            "nodes_mean": round(sum(nodes) / len(nodes), 1),
            "nodes_max": max(nodes),
            "relations_mean": round(sum(edges) / len(edges), 1),
        }
    return out


async def main_async(args: argparse.Namespace) -> int:
    made: str | None = None
    if args.pg:
        made = f"strata_graph_bench_{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(args.pg)
        try:
            await conn.execute(f'CREATE DATABASE "{made}"')
        finally:
            await conn.close()
        base = args.pg.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
        dsn = f"{base}/{made}"
    else:
        dsn = f"sqlite+aiosqlite:///{args.sqlite}"
        for suffix in ("", "-wal", "-shm"):  # a stale WAL beside a new file corrupts it
            await asyncio.to_thread(Path(args.sqlite + suffix).unlink, missing_ok=True)
    try:
        await migrate(dsn)
        db = Database(create_engine(dsn))
        users = [f"user-{i}" for i in range(args.users)]
        started = time.perf_counter()
        counts = await load(db, users, args)
        load_s = time.perf_counter() - started
        service = GraphService(db)
        results = await measure(service, users, args)
        await db.close()
    finally:
        if made is not None:
            conn = await asyncpg.connect(args.pg)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{made}" WITH (FORCE)')
            finally:
                await conn.close()
    facts = machine_facts()
    print_machine(facts)
    backend = "postgresql" if args.pg else "sqlite"
    print(
        f"\n{backend}: {args.users} users × {args.entities} entities, {args.relations} "
        f"relations each ({counts['entities']} / {counts['relations']} in all; "
        f"loaded in {load_s:.1f} s); {args.queries} queries per depth, half from the hub"
    )
    head = ("depth", "p50 ms", "p95 ms", "p99 ms", "nodes", "max", "rels")
    print("{:>5} {:>8} {:>8} {:>8} {:>7} {:>5} {:>7}".format(*head))
    for depth in (1, 2, 3):
        r = results[f"depth_{depth}"]
        ms = r["ms"]
        print(
            f"{depth:>5} {ms['p50']:>8.2f} {ms['p95']:>8.2f} {ms['p99']:>8.2f} "
            f"{r['nodes_mean']:>7} {int(r['nodes_max']):>5} {r['relations_mean']:>7}"
        )
    write_json(
        args.out,
        {
            "machine": facts,
            "backend": backend,
            "config": {k: v for k, v in vars(args).items() if k not in ("out", "pg")},
            "counts": counts,
            "load_seconds": round(load_s, 2),
            "results": results,
        },
    )
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--pg", help="admin DSN of a PostgreSQL server (a database is made)")
    where.add_argument("--sqlite", help="path of a SQLite file (overwritten)")
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--entities", type=int, default=2000, help="per user")
    p.add_argument("--relations", type=int, default=6000, help="per user")
    p.add_argument("--queries", type=int, default=200, help="timed per depth")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("bench/results/graph.json"))
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main_async(parse_args())))
