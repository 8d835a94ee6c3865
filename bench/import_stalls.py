"""What a bulk import costs another user, in-process: the embedded app of the checkout in
the current directory takes `--messages` messages for one user (batches of 200, no
waiting), then its in-process worker promotes them while another user sends one message
every 20 ms, driven through ASGI (no HTTP client sharing the cores).

    cd CHECKOUT && python /path/to/bench/import_stalls.py [--messages 5000]

Printed: the import's promotion rate; the event loop's lag (a heartbeat every
millisecond: p50 / p99 / max, and how many beats were over 10 / 20 / 40 ms late); the
other user's one-message ingest p50 / p99 / max; the SQLite writer lock's waits and the
longest holds by who held it (`ingest_stalls._instrument`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parent))

import httpx
import ingest_stalls
from asgi_lifespan import LifespanManager
from benchlib import machine_facts, print_machine
from ingest_stalls import pct
from latency import make_messages

from app.main import create_app
from app.settings import Settings


async def run(messages: int) -> None:
    settings = Settings(
        _env_file=None,
        data_dir=Path(tempfile.mkdtemp(prefix="strata-import-stalls-")),
        forgetting_enabled=False,
        log_level="WARNING",
    )
    rng = random.Random(0)
    app = create_app(settings)
    async with LifespanManager(app, startup_timeout=120, shutdown_timeout=60) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://strata", timeout=300
        ) as client:

            async def send(
                session: str, user: str, batch: list[dict[str, str]], wait: bool
            ) -> None:
                resp = await client.post(
                    f"/v1/sessions/{session}/messages",
                    json={"user_id": user, "messages": batch, "wait": wait},
                )
                resp.raise_for_status()

            await send("warm", "warm", make_messages(rng, "warm", 10), True)
            for start in range(0, messages, 200):
                batch = make_messages(rng, f"b{start}", min(200, messages - start))
                await send("import", "importer", batch, False)

            done = asyncio.Event()
            lags: list[float] = []
            singles: list[float] = []

            async def heartbeat() -> None:
                while not done.is_set():
                    started = time.perf_counter()
                    await asyncio.sleep(0.001)
                    lags.append((time.perf_counter() - started - 0.001) * 1000)

            async def other_user() -> None:
                n = 0
                while not done.is_set():
                    started = time.perf_counter()
                    await send("other", "other", make_messages(rng, f"o{n}", 1), False)
                    singles.append((time.perf_counter() - started) * 1000)
                    n += 1
                    await asyncio.sleep(0.02)

            tasks = [asyncio.create_task(heartbeat()), asyncio.create_task(other_user())]
            started = time.perf_counter()
            resp = await client.get(
                "/v1/sessions/import", params={"user_id": "importer", "wait": "true"}
            )
            resp.raise_for_status()
            wall = time.perf_counter() - started
            done.set()
            await asyncio.gather(*tasks)

    print(f"import of {messages} messages promoted in {wall:.1f} s = {messages / wall:.0f} msg/s")
    late = ", ".join(f">{ms} ms {sum(lag > ms for lag in lags)}" for ms in (10, 20, 40))
    print(
        f"event loop lag: p50 {pct(lags, 0.5):.2f} / p99 {pct(lags, 0.99):.1f} / "
        f"max {max(lags):.1f} ms over {len(lags)} beats; {late}"
    )
    print(
        f"the other user's one-message ingest: n={len(singles)} p50 {pct(singles, 0.5):.1f} / "
        f"p99 {pct(singles, 0.99):.1f} / max {max(singles):.1f} ms"
    )
    if ingest_stalls.waits:
        waits = ingest_stalls.waits
        print(
            f"writer lock waits: p50 {pct(waits, 0.5):.1f} / p99 {pct(waits, 0.99):.1f} / "
            f"max {max(waits):.1f} ms"
        )
        longest = sorted(ingest_stalls.holds.items(), key=lambda kv: -max(kv[1]))[:4]
        for who, held in longest:
            print(
                f"  held by {who}: n={len(held)} p50 {pct(held, 0.5):.1f} / max {max(held):.1f} ms"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    print_machine(machine_facts())
    ingest_stalls._instrument()
    asyncio.run(run(args.messages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
