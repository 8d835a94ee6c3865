"""Where the api's memory goes, phase by phase: the embedded app of the checkout in the
current directory, its worker promoting in-process, driven through ASGI (no HTTP client
sharing the cores).

    cd CHECKOUT && python /path/to/bench/rss_phases.py [--messages 20000] [--recalls 600]

Printed after start, after ingesting `--messages` of `latency.py`'s synthetic bilingual
turns for one user (batches of 200, the last with `wait=true`), after 8 s idle, after
`--recalls` recalls from 8 concurrent tasks, and after a full collection and a heap trim:
RSS, its peak, anonymous and file-mapped parts (`/proc/self/status`), glibc's heap in use
and free (`mallinfo2`, every arena; `mmapped` is big blocks mapped apart, e.g. the
encoder's tables) and Python's allocated blocks. A growth that a trim gives back is free
heap; one in blocks is live Python objects (caches).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parent))

import httpx
from asgi_lifespan import LifespanManager
from latency import make_messages, query_text

from app.main import create_app
from app.settings import Settings


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallinfo2.restype = _MallInfo2


def snapshot() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) // 1024
    info = _LIBC.mallinfo2()
    out["heap_used"] = info.uordblks >> 20
    out["heap_free"] = info.fordblks >> 20
    out["mmapped"] = info.hblkhd >> 20
    out["py_blocks_k"] = sys.getallocatedblocks() // 1000
    return out


def show(phase: str) -> None:
    figures = " ".join(f"{k}={v}" for k, v in snapshot().items())
    print(f"{phase:24s} {figures}  (MiB; blocks in thousands)", flush=True)


async def run(messages: int, recalls: int) -> None:
    settings = Settings(_env_file=None, data_dir=Path(tempfile.mkdtemp()), log_level="WARNING")
    app = create_app(settings)
    rng = random.Random(7)
    async with LifespanManager(app, startup_timeout=180) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://strata", timeout=900
        ) as client:
            show("start")
            turns = make_messages(rng, "rss", messages)
            for i in range(0, messages, 200):
                resp = await client.post(
                    f"/v1/sessions/rss-{i // 2000}/messages",
                    json={"user_id": "rss", "messages": turns[i : i + 200],
                          "wait": i + 200 >= messages},
                )  # fmt: skip
                resp.raise_for_status()
            show(f"ingested {messages}")
            await asyncio.sleep(8)
            show("idle 8 s")
            gate = asyncio.Semaphore(8)

            async def recall(query: str) -> None:
                async with gate:
                    resp = await client.post("/v1/recall", json={"user_id": "rss", "query": query})
                    resp.raise_for_status()

            await asyncio.gather(*(recall(query_text(rng)) for _ in range(recalls)))
            show(f"{recalls} recalls")
            gc.collect()
            _LIBC.malloc_trim(0)
            show("collected, trimmed")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--recalls", type=int, default=600)
    args = p.parse_args()
    asyncio.run(run(args.messages, args.recalls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
