"""What sealing the Qdrant server's payload text costs (docs/privacy.md, "What stays on
disk"): sealing and opening one point's text (content, sources, metadata) in microseconds,
and the index's candidate lists for a recall of `--top-k` results from a user's `--points`
points, with and without sealing, on qdrant-client's local mode (in memory) and a SQLite
`user_keys` table. Local mode evaluates filters and scores in Python, so its call is far
slower than a server's: the difference between the two runs is what sealing adds.

Usage: python bench/sealing.py [--points 2000] [--top-k 50] [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core import sealing, terms
from app.stores import qdrant_server
from app.stores import sessions as session_store
from app.stores.db import Database, create_engine, migrate
from app.stores.qdrant_server import (
    QdrantServerIndex,
    _keyed_terms,
    _opened,
    _Owner,
    _sealed,
)
from app.stores.user_keys import UserKeys
from app.stores.vectors import MemoryPayload, VectorPoint, VectorQuery

DIM = 512
TENANT, USER = "bench", "ana"


def payload(i: int) -> MemoryPayload:
    return MemoryPayload(
        tenant_id=TENANT,
        user_id=USER,
        session_id="s1",
        memory_type="episodic",
        content=f"user: On day {i} we talked about the trip to Lisbon, the hotel near the "
        f"river and the tram 28 that was always full; remember the code {i:05d}.",
        importance=0.5,
        sources=[{"session_id": "s1", "message_id": f"m{i}", "seq": i}],
        metadata={"topic": "travel", "day": i % 30},
        created_at=datetime.now(UTC),
        role="user",
    )


def micro_terms(rounds: int) -> tuple[float, float, int]:
    """Microseconds to key one point's sparse vector and one query's (median of `rounds`),
    and the point's number of terms."""
    owner = _Owner(sealing.place(TENANT, USER), sealing.Sealer(sealing.new_key()))
    doc = terms.document_vector(payload(7).content)
    query = terms.query_vector("trip to Lisbon tram")
    doc_us, query_us = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        _keyed_terms(owner, doc)
        doc_us.append((time.perf_counter() - start) * 1e6)
        start = time.perf_counter()
        _keyed_terms(owner, query)
        query_us.append((time.perf_counter() - start) * 1e6)
    return statistics.median(doc_us), statistics.median(query_us), len(doc.indices)


def micro(rounds: int) -> tuple[float, float]:
    """Microseconds to seal, then to open, one point's text (median of `rounds`)."""
    owner = _Owner(sealing.place(TENANT, USER), sealing.Sealer(sealing.new_key()))
    raw = payload(7).to_dict()
    pid = str(uuid.uuid4())
    seal_us, open_us = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        stored = _sealed(raw, owner, pid)
        seal_us.append((time.perf_counter() - start) * 1e6)
        start = time.perf_counter()
        _opened(stored, owner, pid, USER)
        open_us.append((time.perf_counter() - start) * 1e6)
    return statistics.median(seal_us), statistics.median(open_us)


OPENING: list[float] = []  # seconds spent opening payloads, per call of `_opened`


def _timed_open(payload: Any, owner: _Owner, pid: str, user_id: str) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        return _opened(payload, owner, pid, user_id)
    finally:
        OPENING.append(time.perf_counter() - start)


async def recall_ms(
    indexes: dict[str, QdrantServerIndex], points: list[VectorPoint], top_k: int, rounds: int
) -> tuple[dict[str, list[float]], list[float]]:
    """Per index, the candidates call's time of each round (the indexes take turns, so
    that the machine's load falls on both alike); the time spent opening, per call."""
    for index in indexes.values():
        await index.ensure_collection()
        await index.upsert(points)
    rng = np.random.default_rng(1)
    out: dict[str, list[float]] = {name: [] for name in indexes}
    opening = []
    for r in range(rounds + 5):
        query = VectorQuery(
            TENANT,
            USER,
            rng.standard_normal(DIM).astype(np.float32).tolist(),
            terms.query_vector("trip to Lisbon tram"),
            limit=top_k,
        )
        for name, index in indexes.items():
            OPENING.clear()
            start = time.perf_counter()
            lists = await index.candidates(query)
            if r >= 5:  # the first calls warm up
                out[name].append((time.perf_counter() - start) * 1000)
                if OPENING:
                    opening.append(sum(OPENING) * 1000)
            assert len(lists.dense) == top_k
    return out, opening


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)

    seal_us, open_us = micro(args.rounds * 10)
    print(f"one point's text: seal {seal_us:.1f} us, open {open_us:.1f} us (median)")
    doc_us, query_us, n_terms = micro_terms(args.rounds * 10)
    print(
        f"keying term ids: a point's {n_terms} terms {doc_us:.1f} us, "
        f"a query's {query_us:.1f} us (median)"
    )
    size = len(orjson.dumps(payload(7).to_dict()))
    owner = _Owner(b"o", sealing.Sealer(bytes(32)))
    sealed = len(orjson.dumps(_sealed(payload(7).to_dict(), owner, str(uuid.uuid4()))))
    print(f"payload size: {size} B plain, {sealed} B sealed")

    rng = np.random.default_rng(0)
    points = [
        VectorPoint(
            uuid.uuid4(),
            rng.standard_normal(DIM).astype(np.float32).tolist(),
            terms.document_vector(payload(i).content),
            payload(i),
        )
        for i in range(args.points)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        dsn = f"sqlite+aiosqlite:///{tmp}/keys.db"
        await migrate(dsn)
        db = Database(create_engine(dsn))
        async with db.transaction() as tx:
            await session_store.ensure_user(tx, TENANT, USER, datetime.now(UTC))
        from qdrant_client import AsyncQdrantClient

        clients = [AsyncQdrantClient(location=":memory:") for _ in range(2)]
        indexes = {
            "plain": QdrantServerIndex(clients[0], "bench", DIM, local=True),
            "sealed": QdrantServerIndex(clients[1], "bench", DIM, local=True, keys=UserKeys(db)),
        }
        qdrant_server._opened = _timed_open
        results, opening = await recall_ms(indexes, points, args.top_k, args.rounds)
        for client in clients:
            await client.close()
        await db.close()
    for name, ms in results.items():
        q = statistics.quantiles(ms, n=100)
        print(
            f"candidates, {name}: p50 {statistics.median(ms):.2f} ms, p95 {q[94]:.2f} ms "
            f"({args.points} points, top_k {args.top_k}, {args.rounds} rounds)"
        )
    extra = statistics.median(results["sealed"]) - statistics.median(results["plain"])
    print(f"sealed minus plain: {extra:+.2f} ms at p50 (local mode's noise is larger)")
    q = statistics.quantiles(opening, n=100)
    print(
        f"opening the hits' text, per recall: p50 {statistics.median(opening):.2f} ms, "
        f"p95 {q[94]:.2f} ms (both lists, {args.top_k} each, a point in both opened once)"
    )


if __name__ == "__main__":
    asyncio.run(main())
