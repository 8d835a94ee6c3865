"""Promotion's throughput in-process, with the model's share apart: the service level
"promotion ≥ 500 msg/s" without HTTP or a second process in the way, for a before/after.

    python bench/promotion.py [--sessions 1] [--messages 1500] [--rounds 3]
        [--max-sessions 8] [--embedding-url URL] [--fake-embedder]

An embedded app (SQLite + Qdrant Edge, a fresh data directory) is started in this process,
its own worker cancelled; each round ingests `--messages` messages into each of
`--sessions` sessions (batches of 200, `wait=false`), then drives the promoter pass after
pass (`--max-sessions` claimed per pass, as the worker does) until the backlog is gone.
Printed per round: messages/s, the process's CPU per message (every thread), and the wall
time spent in the embedder's calls per message. `--embedding-url` embeds through an
OpenAI-compatible endpoint instead (e.g. `bench/embed_server.py`, the same model in a
process of its own); `--fake-embedder` returns hashed vectors at once, so what is left is
promotion's own cost. Run it from the checkout to measure: it imports that checkout's `app`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import numpy as np
from asgi_lifespan import LifespanManager
from benchlib import JSON, machine_facts, print_machine, write_json
from latency import make_messages

from app.main import create_app
from app.settings import Settings
from app.wiring import build_promoter

ROOT = Path(__file__).resolve().parent.parent


def _hashed(texts: Sequence[str]) -> list[list[float]]:
    out = []
    for text in texts:
        v = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(512)
        out.append((v / np.linalg.norm(v)).astype(np.float32).tolist())
    return out


async def run(args: argparse.Namespace) -> JSON:
    extra: dict[str, Any] = {}
    if args.embedding_url:
        extra = {
            "embedder": "openai",
            "embedding_url": args.embedding_url,
            "embedding_model": "use",
            "embedding_dim": 512,
        }
    settings = Settings(
        _env_file=None,
        data_dir=Path(tempfile.mkdtemp(prefix="strata-promotion-")),
        forgetting_enabled=False,
        log_level="WARNING",
        **extra,
    )
    app = create_app(settings)
    rounds: list[JSON] = []
    async with LifespanManager(app, startup_timeout=120, shutdown_timeout=60) as manager:
        for task in asyncio.all_tasks():
            if task.get_name() == "strata-worker":
                task.cancel()  # this script drives the promoter itself
        resources = manager._state["resources"]
        embedder = resources.embedder
        in_model = [0.0]
        real_embed = embedder.embed

        async def timed(texts: Sequence[str], *, bulk: bool = False) -> list[list[float]]:
            started = time.perf_counter()
            try:
                return _hashed(texts) if args.fake_embedder else await real_embed(texts, bulk=bulk)
            finally:
                in_model[0] += time.perf_counter() - started

        embedder.embed = timed
        rng = random.Random(args.seed)
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://strata") as client:

            async def ingest(tag: str, sessions: int, messages: int) -> None:
                for s in range(sessions):
                    for start in range(0, messages, 200):
                        batch = make_messages(rng, f"{tag}{s}-{start}", min(200, messages - start))
                        resp = await client.post(
                            f"/v1/sessions/{tag}{s}/messages",
                            json={"user_id": "promotion", "messages": batch, "wait": False},
                        )
                        resp.raise_for_status()

            promoter = build_promoter(resources, "bench")
            await ingest("warm", 2, 20)
            while await promoter.run_once(max_sessions=args.max_sessions):
                pass
            for n in range(args.rounds):
                await ingest(f"r{n}-", args.sessions, args.messages)
                in_model[0] = 0.0
                wall, cpu, done = time.perf_counter(), time.process_time(), 0
                while promoted := await promoter.run_once(max_sessions=args.max_sessions):
                    done += promoted
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                row = {
                    "messages": done,
                    "per_second": done / wall,
                    "cpu_ms_per_message": cpu * 1000 / done,
                    "model_ms_per_message": in_model[0] * 1000 / done,
                }
                rounds.append(row)
                print(
                    f"round {n}: {done} messages, {row['per_second']:.0f} msg/s, "
                    f"CPU {row['cpu_ms_per_message']:.2f} ms/msg, "
                    f"in the embedder's calls {row['model_ms_per_message']:.2f} ms/msg",
                    flush=True,
                )
    median = statistics.median(r["per_second"] for r in rounds)
    print(f"median {median:.0f} msg/s")
    return {"machine": machine_facts(), "args": vars(args), "rounds": rounds, "median": median}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--messages", type=int, default=1500, help="per session and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument("--embedding-url", default=None)
    parser.add_argument("--fake-embedder", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/promotion.json")
    args = parser.parse_args(argv)
    print_machine(machine_facts())
    write_json(args.out, asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
