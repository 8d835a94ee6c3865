"""Profile recall (or context) in-process with pyinstrument: where a request's time goes.

    cd CHECKOUT && python /path/to/bench/profile_recall.py --data-dir DIR [--clients 8]
        [--context]

Opens the services of the checkout in the current directory (so a checkout of main
profiles the "before") on a data directory seeded by `seed.py` (copied first, so the
seeded one stays as it was), runs `--requests` recalls from `--clients` concurrent tasks
(`--context`: context calls with a 4,000-token budget on a session of 20 turns, as
`scale.py` measures them), and prints pyinstrument's call tree (`--out` writes it too).
Work in other threads (the index query, the model) shows as the time the request awaits
it. pyinstrument is a bench tool only: `pip install pyinstrument`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parent))

from latency import query_text
from pyinstrument import Profiler

from app.resources import open_resources
from app.schemas.context import ContextRequest
from app.schemas.ingest import IngestRequest
from app.schemas.recall import RecallRequest
from app.settings import Settings
from app.wiring import build_container


async def profile(args: argparse.Namespace) -> str:
    for name in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_QDRANT_URL"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="strata-profile.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(args.data_dir, data)
        settings = Settings(
            data_dir=data, log_level="WARNING", worker_in_process=False, index_build_min_points=0
        )
        async with open_resources(settings) as r:
            services = build_container(r).services
            rng = random.Random(3)
            queries = [query_text(rng) for _ in range(args.requests)]
            tenant = settings.default_tenant
            live = f"{args.user}-live"
            if args.context:
                turns = [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": query_text(rng)}
                    for i in range(20)
                ]
                await services.ingest.add_messages(
                    tenant,
                    live,
                    IngestRequest.model_validate({"user_id": args.user, "messages": turns}),
                )

            async def client(mine: list[str]) -> None:
                for q in mine:
                    if args.context:
                        await services.context.build(
                            tenant,
                            live,
                            ContextRequest(user_id=args.user, query=q, token_budget=4000),
                        )
                    else:
                        await services.recall.recall(
                            tenant, RecallRequest(user_id=args.user, query=q, top_k=10)
                        )

            await client(queries[:20])  # warm
            profiler = Profiler(async_mode="enabled", interval=0.0005)
            start = time.perf_counter()
            cpu = time.process_time()
            profiler.start()
            await asyncio.gather(*(client(queries[i :: args.clients]) for i in range(args.clients)))
            profiler.stop()
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu
            await services.recall.drain()
            head = (
                f"{args.requests} {'context calls' if args.context else 'recalls'}, "
                f"{args.clients} concurrent: {wall:.2f}s wall, "
                f"{1000 * wall / args.requests:.2f} ms/request, process CPU "
                f"{1000 * cpu / args.requests:.2f} ms/request\n"
            )
            return head + str(profiler.output_text(unicode=False, color=False, show_all=False))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--user", default="scale-user")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--context", action="store_true", help="profile context, not recall")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    text = asyncio.run(profile(args))
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
