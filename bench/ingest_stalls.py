"""One-message ingest in-process, and what held it up: the embedded app of the checkout in
the current directory, its worker promoting as messages come, driven through ASGI (no HTTP
client sharing the cores), while a thread watches the event loop.

    cd CHECKOUT && python /path/to/bench/ingest_stalls.py [--requests 1000] [--lag-ms 8]

Printed: the requests' p50 / p99 / max; the event loop's stalls longer than `--lag-ms`
(a heartbeat task every millisecond, and a watcher thread that records the loop thread's
stack when the beat is late: the innermost frames, by count); and, where the checkout has
the SQLite writer lock (app/stores/db.py), how long write transactions waited for it and
how long each kind held it; and where one-hop writes are (`Database.write_in_one`), their
whole time beside their SQL's on the writer's thread.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())

import httpx
from asgi_lifespan import LifespanManager

from app.main import create_app
from app.settings import Settings
from app.stores import db as db_module

waits: list[float] = []
holds: dict[str, list[float]] = collections.defaultdict(list)
hops: dict[str, list[float]] = collections.defaultdict(list)  # one-hop writes, where there


def _instrument() -> None:
    """Time the writer lock's waits and holds, where the checkout has it."""
    enter, leave = db_module._Transaction.__aenter__, db_module._Transaction.__aexit__

    async def timed_enter(self: Any) -> Any:
        start = time.perf_counter()
        session = await enter(self)
        if getattr(self, "_writer", None) is not None:
            waits.append((time.perf_counter() - start) * 1000)
            self._bench_at = time.perf_counter()
            self._bench_who = "/".join(f.name for f in traceback.extract_stack()[-5:-1])
        return session

    async def timed_leave(self: Any, *exc: Any) -> None:
        try:
            await leave(self, *exc)
        finally:
            if getattr(self, "_bench_at", None):
                held = (time.perf_counter() - self._bench_at) * 1000
                holds[self._bench_who].append(held)

    db_module._Transaction.__aenter__ = timed_enter  # type: ignore[method-assign]
    db_module._Transaction.__aexit__ = timed_leave  # type: ignore[method-assign,assignment]

    one_hop = getattr(db_module.Database, "write_in_one", None)
    if one_hop is None:
        return

    async def timed_one_hop(self: Any, work: Any) -> Any:
        ran: list[float] = []

        def timed_work(conn: Any) -> Any:
            at = time.perf_counter()
            try:
                return work(conn)
            finally:
                ran.append((time.perf_counter() - at) * 1000)

        start = time.perf_counter()
        try:
            return await one_hop(self, timed_work)
        finally:
            total = (time.perf_counter() - start) * 1000
            hops["total"].append(total)
            hops["work"].append(ran[0] if ran else 0.0)

    db_module.Database.write_in_one = timed_one_hop  # type: ignore[method-assign]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def run(requests: int, lag: float) -> None:
    settings = Settings(_env_file=None, data_dir=Path(tempfile.mkdtemp()), log_level="WARNING")
    app = create_app(settings)
    loop_thread = threading.get_ident()
    beat = [time.monotonic()]
    stop = threading.Event()
    stalls: collections.Counter[str] = collections.Counter()

    async def heartbeat() -> None:
        while True:
            beat[0] = time.monotonic()
            await asyncio.sleep(0.001)

    def watch() -> None:
        seen = 0.0
        while not stop.is_set():
            time.sleep(0.002)
            if time.monotonic() - beat[0] > lag and beat[0] != seen:
                frame = sys._current_frames().get(loop_thread)
                if frame is not None:
                    stack = traceback.extract_stack(frame)[-4:][::-1]
                    stalls[" <- ".join(f"{Path(f.filename).stem}.{f.name}" for f in stack)] += 1
                    seen = beat[0]

    async with LifespanManager(app, startup_timeout=120) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://strata") as client:
            beating = asyncio.create_task(heartbeat())
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            ms: list[float] = []
            for i in range(requests):
                text = f"Message {i}: I went to the market and bought apples and pears today."
                start = time.perf_counter()
                resp = await client.post(
                    "/v1/sessions/stalls/messages",
                    json={"user_id": "stalls", "messages": [{"role": "user", "content": text}]},
                )
                ms.append((time.perf_counter() - start) * 1000)
                resp.raise_for_status()
            stop.set()
            beating.cancel()
    print(
        f"{requests} one-message requests: p50 {pct(ms, 0.5):.2f} ms, p99 {pct(ms, 0.99):.2f} ms,"
        f" max {max(ms):.1f} ms"
    )
    print(f"event loop stalls over {lag * 1000:.0f} ms: {sum(stalls.values())}")
    for where, n in stalls.most_common(8):
        print(f"  {n:4d}  {where}")
    if hops["total"]:
        total, work = hops["total"], hops["work"]
        slow = [i for i, t in enumerate(total) if t >= pct(total, 0.99)]
        print(
            f"one-hop writes: {len(total)}, whole p50 {pct(total, 0.5):.2f} / p99"
            f" {pct(total, 0.99):.2f} ms, their SQL on the writer's thread p50"
            f" {pct(work, 0.5):.2f} / p99 {pct(work, 0.99):.2f} ms; the slowest 1%:"
            f" whole {sum(total[i] for i in slow) / len(slow):.1f} ms, SQL"
            f" {sum(work[i] for i in slow) / len(slow):.1f} ms (the rest: the writer's turn"
            " and the hops)"
        )
    if waits:
        print(
            f"writer lock waits: p50 {pct(waits, 0.5):.2f} ms, p99 {pct(waits, 0.99):.2f} ms,"
            f" over 10 ms: {sum(w > 10 for w in waits)} of {len(waits)}"
        )
        for who, held in sorted(holds.items(), key=lambda kv: -sum(kv[1]))[:6]:
            print(
                f"  held by {who[-60:]:60s} n {len(held):5d}  p50 {pct(held, 0.5):.2f}"
                f"  p99 {pct(held, 0.99):.2f} ms"
            )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--lag-ms", type=float, default=8)
    args = p.parse_args()
    _instrument()
    asyncio.run(run(args.requests, args.lag_ms / 1000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
