"""The floor under recall's service level: what one recall's native calls cost (the query's
embedding and the index's searches), and what that allows two cores at most.

    cd CHECKOUT && python /path/to/bench/native_floor.py --data-dir DIR [--user U]
        [--queries 400] [--clients 8] [--cores 2]

On a copy of a directory seeded by `seed.py` (as `profile_recall.py`), in-process, no HTTP:

- the bundled model's time per query, one query a call and `--clients` a call (the
  micro-batch concurrent recalls share, `app/providers/batching.py`);
- the time inside Qdrant Edge's own calls (`query_batch`, `retrieve`) per recall, as the
  recall asks them (`QdrantEdgeIndex.candidates`: both lists, the cosines, change
  promotion's comparisons), with the payload cache warm; and the whole index call beside
  it (the Python around those calls in the index's thread, and the hop to it);
- the ceiling this puts on recalls per second with `--cores` cores and nothing else to do
  (no HTTP, no scoring, no other Python), and by Little's law the lowest mean latency
  `--clients` closed-loop clients can then see: clients / ceiling.

The index's calls hold the GIL for their whole length (bench/README.md), so on two cores
they also shut the process's Python out while they run; the ceiling ignores that, and is
higher than anything the service can reach.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parent))

from benchlib import machine_facts, print_machine
from latency import query_text

from app.core import terms
from app.resources import open_resources
from app.services.search import states_change
from app.settings import Settings
from app.stores.vectors import VectorQuery


class _TimedShard:
    """The shard, with the time spent inside its searches and reads added up."""

    def __init__(self, shard: Any) -> None:
        self._shard = shard
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)

    def _timed(self, name: str, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return getattr(self._shard, name)(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def query_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("query_batch", *args, **kwargs)

    def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("retrieve", *args, **kwargs)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The floor's figures (milliseconds, recalls/s); `report` prints them."""
    for name in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_QDRANT_URL"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="strata-floor.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(args.data_dir, data)
        settings = Settings(
            data_dir=data, log_level="WARNING", worker_in_process=False, index_build_min_points=0
        )
        async with open_resources(settings) as r:
            rng = random.Random(11)
            texts = [query_text(rng) for _ in range(args.queries)]
            model: Any = getattr(r.embedder, "inner", r.embedder)  # under the metrics wrapper
            encode = model._encode  # the bundled model's own call, no thread hop
            encode(texts[:20])  # warm
            one = _per_query(lambda batch: encode(batch), texts, 1)
            many = _per_query(lambda batch: encode(batch), texts, args.clients)
            dense = encode(texts)
            index = r.vectors
            queries = [
                VectorQuery(
                    tenant_id=settings.default_tenant,
                    user_id=args.user,
                    dense=vector,
                    sparse=terms.query_vector(text),
                    limit=settings.candidate_pool,
                    kinds=["memory"],
                    valid_at=time.time(),
                    compare_turns=lambda p: (
                        settings.change_similarity if states_change(p) else None
                    ),
                )
                for text, vector in zip(texts, dense, strict=True)
            ]
            for q in queries:  # warm: every candidate's payload and text facts read once
                await index.candidates(q)
            shard = _TimedShard(index._shard)  # type: ignore[attr-defined]
            index._shard = shard  # type: ignore[attr-defined]
            native, whole = [], []
            for q in queries:
                shard.seconds = 0.0
                start = time.perf_counter()
                await index.candidates(q)
                whole.append(time.perf_counter() - start)
                native.append(shard.seconds)
            index._shard = shard._shard  # type: ignore[attr-defined]
            points = await index.count()

    embed_ms = 1000 * many
    native_ms = 1000 * statistics.mean(native)
    floor_ms = embed_ms + native_ms
    return {
        "points": points,
        "recalls": len(queries),
        "clients": args.clients,
        "cores": args.cores,
        "embed_one_ms": 1000 * one,
        "embed_ms": embed_ms,
        "native_ms": native_ms,
        "native_p50_ms": 1000 * statistics.median(native),
        "index_call_ms": 1000 * statistics.mean(whole),
        "index_call_p50_ms": 1000 * statistics.median(whole),
        "floor_ms": floor_ms,
        "ceiling": args.cores * 1000 / floor_ms,
    }


def report(f: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{f['points']} points in the index, {f['recalls']} recalls' native calls, "
            "one at a time",
            f"query embedding: {f['embed_one_ms']:.2f} ms a query alone, {f['embed_ms']:.2f} ms "
            f"a query in calls of {f['clients']}",
            f"index: Edge's own calls {f['native_ms']:.2f} ms a recall (p50 "
            f"{f['native_p50_ms']:.2f}); the whole index call {f['index_call_ms']:.2f} ms "
            f"(p50 {f['index_call_p50_ms']:.2f})",
            f"native floor: {f['floor_ms']:.2f} ms of CPU a recall -> at most "
            f"{f['ceiling']:.0f} recalls/s on {f['cores']} cores with no HTTP, scoring or "
            "other Python",
            f"{f['clients']} closed-loop clients: mean latency at least "
            f"{1000 * f['clients'] / f['ceiling']:.1f} ms (Little's law: clients / throughput)",
        ]
    )


def _per_query(encode: Any, texts: list[str], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        encode(texts[i : i + batch])
    return (time.perf_counter() - start) / len(texts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--user", default="scale-user")
    p.add_argument("--queries", type=int, default=400)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--cores", type=int, default=2)
    args = p.parse_args()
    print_machine(machine_facts())
    print(report(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
