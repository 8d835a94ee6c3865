"""Seed one user with N memories in an embedded data directory, before its server starts.

`python bench/seed.py --data-dir DIR --user USER --memories 100000` writes the SQL rows and
the index points that promotion would write (a turn's `dense` vector blended with the turn
before it, its own `turn` vector, BM25 terms with the previous turn's at half weight,
"speaker: text" content), through the app's own stores, at ~5,000 memories/s instead of
promotion's ~350 messages/s. Texts are `latency.py`'s synthetic English, Chinese and mixed
sentences; only a pool of distinct sentences is embedded (default 3,000) and each memory is
a pair of them (its turn, the turn before), so 100k memories differ without 100k embeddings.

The data directory is the format any version of the service opens (`STRATA_DATA_DIR`), so
the same seeded directory serves a "before" (main) and an "after" server.
`--build-index` also builds the index's HNSW graph the way the running service does in
the background (only where the service has that builder).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import message_text

from app.core import terms
from app.core.dedupe import content_hash
from app.resources import open_resources
from app.settings import Settings
from app.stores import memories as memory_store
from app.stores.vectors import MemoryPayload, VectorPoint

BATCH = 2000


async def seed(args: argparse.Namespace) -> None:
    for name in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_QDRANT_URL"):
        os.environ.pop(name, None)
    # No background builds while seeding (`--build-index` builds once, at the end).
    settings = Settings(data_dir=args.data_dir, log_level="WARNING", index_build_min_points=0)
    rng = random.Random(args.seed)
    pool = list(dict.fromkeys(message_text(rng) for _ in range(args.pool if args.memories else 0)))
    start = time.perf_counter()
    async with open_resources(settings) as r:
        vecs = np.asarray(await r.embedder.embed(pool, bulk=True) if pool else [], np.float32)
        print(f"embedded {len(pool)} sentences in {time.perf_counter() - start:.1f}s", flush=True)
        base = datetime.now(UTC) - timedelta(days=365)
        nrng = np.random.default_rng(args.seed)
        w = settings.dense_context_weight
        written = 0
        while written < args.memories:
            n = min(BATCH, args.memories - written)
            rows: list[memory_store.MemoryValues] = []
            points: list[VectorPoint] = []
            for k in range(n):
                i = written + k
                own, prev = int(nrng.integers(len(pool))), int(nrng.integers(len(pool)))
                text, context = pool[own], pool[prev]
                blended = vecs[own] + w * vecs[prev]
                blended /= max(float(np.linalg.norm(blended)), 1e-12)
                created = base + timedelta(seconds=i * 300)
                role = "user" if i % 2 == 0 else "assistant"
                content = f"{role}: {text}"
                mid = uuid.uuid5(uuid.NAMESPACE_URL, f"seed/{args.user}/{i}")
                session = f"{args.user}-s{i // 200}"
                sources: list[dict[str, Any]] = [
                    {"session_id": session, "message_id": f"m{i}", "seq": i % 200 + 1}
                ]
                rows.append(
                    {
                        "id": mid,
                        "tenant_id": settings.default_tenant,
                        "user_id": args.user,
                        "session_id": session,
                        "memory_type": "episodic",
                        "content": content,
                        "importance": 0.5,
                        "access_count": 0,
                        "last_accessed_at": None,
                        "strength": 1.0,
                        "pinned": False,
                        "valid_from": created,
                        "sources": sources,
                        "metadata_": {},
                        "content_hash": content_hash(content),
                        "created_at": created,
                        "updated_at": created,
                    }
                )
                payload = MemoryPayload(
                    tenant_id=settings.default_tenant,
                    user_id=args.user,
                    session_id=session,
                    memory_type="episodic",
                    content=content,
                    importance=0.5,
                    sources=sources,
                    metadata={},
                    created_at=created,
                    role=role,
                )
                sparse = terms.document_vector(content, [context], 0.5)
                points.append(
                    VectorPoint(mid, blended.tolist(), sparse, payload, vecs[own].tolist())
                )
            async with r.db.transaction() as tx:
                await memory_store.insert_many(tx, rows)
            await r.vectors.upsert(points)
            written += n
            if written % 20_000 == 0 or written == args.memories:
                print(f"  {written} memories, {time.perf_counter() - start:.1f}s", flush=True)
        if args.build_index:
            build = getattr(r.vectors, "build_now", None)
            if build is None:
                print("this version of the index has no HNSW builder; left brute force")
            else:
                t = time.perf_counter()
                await build()
                print(f"HNSW built in {time.perf_counter() - t:.1f}s", flush=True)
    print(f"seeded {args.memories} memories in {time.perf_counter() - start:.1f}s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--user", default="bench-user")
    p.add_argument("--memories", type=int, default=1000)
    p.add_argument("--pool", type=int, default=3000, help="distinct sentences embedded")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--build-index", action="store_true", help="build HNSW before returning")
    asyncio.run(seed(p.parse_args()))


if __name__ == "__main__":
    main()
