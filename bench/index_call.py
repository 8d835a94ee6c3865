"""The index call of a recall alone, on a seeded data directory: what the search costs.

    cd CHECKOUT && python /path/to/bench/index_call.py --data-dir DIR [--user U]

Opens the services of the checkout in the current directory (so a checkout of main measures
the "before") on a copy of a directory seeded by `seed.py`, embeds `--queries` synthetic
queries first, then times `candidates()` as recall asks it (both lists, the candidate pool,
the user's scope and the valid-time filter): each query alone, then the same queries from
`--clients` concurrent tasks. Prints medians, p90 and the calls per second. The first pass
reads most candidates' payloads and vectors back from the shard (the caches are cold); the
second (`warm`) finds them in the caches when `--cache-mb` holds them all, so it times the
search itself.
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

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parent))

from latency import query_text

from app.core import terms
from app.resources import open_resources
from app.settings import Settings
from app.stores.vectors import VectorQuery


async def measure(args: argparse.Namespace) -> str:
    for name in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_QDRANT_URL"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="strata-index.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(args.data_dir, data)
        opened = time.perf_counter()
        settings = Settings(
            data_dir=data,
            log_level="WARNING",
            worker_in_process=False,
            index_build_min_points=0,
            index_vector_cache_mb=args.cache_mb,
        )
        async with open_resources(settings) as r:
            opened = time.perf_counter() - opened
            rss = _rss_mib()
            rng = random.Random(5)
            texts = [query_text(rng) for _ in range(args.queries)]
            dense = await r.embedder.embed(texts)
            queries = [
                VectorQuery(
                    tenant_id=settings.default_tenant,
                    user_id=args.user,
                    dense=vector,
                    sparse=terms.query_vector(text),
                    limit=settings.candidate_pool,
                    kinds=["memory"],
                    valid_at=time.time(),
                )
                for text, vector in zip(texts, dense, strict=True)
            ]
            found = [await r.vectors.candidates(q) for q in queries[:10]]  # warm
            assert any(lists.dense and lists.sparse for lists in found), "nothing found"
            passes = []
            for _ in ("cold", "warm"):
                alone = []
                for q in queries:
                    start = time.perf_counter()
                    await r.vectors.candidates(q)
                    alone.append(1000 * (time.perf_counter() - start))
                alone.sort()
                passes.append(alone)

            async def client(mine: list[VectorQuery]) -> None:
                for q in mine:
                    await r.vectors.candidates(q)

            start = time.perf_counter()
            await asyncio.gather(*(client(queries[i :: args.clients]) for i in range(args.clients)))
            rate = len(queries) / (time.perf_counter() - start)
        cold, warm = (
            f"p50 {statistics.median(a):.2f} ms, p90 {a[int(0.9 * len(a))]:.2f} ms" for a in passes
        )
        return (
            f"opened in {opened:.1f}s (RSS {rss:.0f} MiB); {len(queries)} index calls one at "
            f"a time: cold {cold}; warm {warm}; {args.clients} concurrent (warm): "
            f"{rate:.0f} calls/s"
        )


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--user", default="bench-user")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--cache-mb", type=int, default=1024, help="STRATA_INDEX_VECTOR_CACHE_MB")
    print(asyncio.run(measure(p.parse_args())))


if __name__ == "__main__":
    main()
