"""Export and erasure of a large user against a running Strata (docs/privacy.md): export
size, time and the server's RSS while it streams, for a small and a large user (the same
peak for both shows the export runs in constant memory); then the erasure's time and
receipt.

Usage: python bench/userdata.py [--url http://127.0.0.1:8000] [--messages 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from benchlib import (
    JSON,
    Api,
    find_listening_pid,
    machine_facts,
    print_machine,
    process_memory,
    wait_indexed,
    wait_ready,
    write_json,
)

WORDS = ["garden", "tram", "harbour", "violin", "dumplings", "kite", "telescope", "ledger",
         "market", "river", "北京", "烤鸭", "海边", "图书馆", "公园"]  # fmt: skip


def text(i: int) -> str:
    w = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(12)]
    return f"Note {i}: " + " ".join(w)


async def load_user(api: Api, user: str, messages: int, per_session: int, batch: int) -> list[str]:
    sessions = [f"{user}-s{n}" for n in range((messages + per_session - 1) // per_session)]
    i = 0
    for sid in sessions:
        left = min(per_session, messages - i)
        while left > 0:
            n = min(batch, left)
            body = [
                {"id": f"m{i + k}", "role": "user" if (i + k) % 2 == 0 else "assistant",
                 "content": text(i + k)}
                for k in range(n)
            ]  # fmt: skip
            data, _ = await api.ingest(sid, user, body, wait=False)
            if data is None:
                raise SystemExit(f"ingest failed: {api.errors.as_json()}")
            i += n
            left -= n
    return sessions


class RssSampler:
    """The server's VmRSS every `every` seconds, in a thread (the event loop is busy
    reading the stream)."""

    def __init__(self, pid: int | None, every: float = 0.02) -> None:
        self.pid = pid
        self.every = every
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and self.pid:
            mem = process_memory(self.pid)
            if mem:
                self.peak = max(self.peak, float(mem.get("vmrss_mib", 0.0)))
            time.sleep(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def export(api: Api, user: str, pid: int | None) -> JSON:
    before = process_memory(pid) if pid else None
    size = 0
    with tempfile.TemporaryFile() as out, RssSampler(pid) as rss:
        start = time.perf_counter()
        async with api.client.stream("GET", f"/v1/users/{user}/export") as resp:
            if resp.status_code != 200:
                raise SystemExit(f"export: {resp.status_code} {await resp.aread()!r}")
            first_byte = None
            async for chunk in resp.aiter_bytes():
                if first_byte is None:
                    first_byte = time.perf_counter() - start
                size += len(chunk)
                out.write(chunk)
        seconds = time.perf_counter() - start
        out.seek(0)
        doc = json.load(out)  # the document is valid JSON, and holds every message
    messages = sum(len(s["messages"]) for s in doc["sessions"])
    base = float(before["vmrss_mib"]) if before else None
    return {
        "bytes": size,
        "seconds": round(seconds, 3),
        "first_byte_ms": round((first_byte or 0) * 1000, 1),
        "mib_per_s": round(size / 2**20 / seconds, 1),
        "messages": messages,
        "memories": len(doc["memories"]),
        "server_rss_before_mib": round(base, 1) if base else None,
        "server_rss_peak_mib": round(rss.peak, 1) if pid else None,
        "server_rss_growth_mib": round(rss.peak - base, 1) if base else None,
    }


async def erase(api: Api, user: str) -> JSON:
    start = time.perf_counter()
    resp = await api.client.delete(f"/v1/users/{user}")
    receipt: JSON = resp.json()
    while resp.status_code == 202:
        await asyncio.sleep(0.2)
        job = (await api.client.get(f"/v1/jobs/{receipt['job_id']}")).json()
        if job["state"] == "succeeded":
            receipt = {**receipt, "state": "succeeded", "counts": job["result"]["counts"]}
            break
        if job["state"] == "failed":
            raise SystemExit(f"erasure failed: {job}")
    seconds = time.perf_counter() - start
    gone = await api.client.get(f"/v1/users/{user}/export")
    return {
        "seconds": round(seconds, 3),
        "counts": receipt["counts"],
        "export_after": gone.status_code,
    }


async def main_async(args: argparse.Namespace) -> int:
    port = urlsplit(args.url).port or 80
    facts = machine_facts()
    print_machine(facts)
    report: JSON = {"machine": facts, "args": vars(args) | {"out": str(args.out)}}
    async with Api(args.url, args.api_key, timeout=600) as api:
        if not await wait_ready(api, 120):
            print("server not ready", file=sys.stderr)
            return 1
        pid = args.pid or find_listening_pid(port)  # once it listens
        run = uuid.uuid4().hex[:6]
        users = {"small": args.small, "large": args.messages}
        for label, n in users.items():
            user = f"bench-{label}-{run}"
            t0 = time.perf_counter()
            sessions = await load_user(api, user, n, args.per_session, args.batch)
            ok, _ = await wait_indexed(api, [(s, user) for s in sessions], timeout=3600)
            print(f"{label}: {n} messages in {len(sessions)} sessions ingested and indexed "
                  f"in {time.perf_counter() - t0:.1f} s (indexed: {ok})")  # fmt: skip
            result = {
                "messages": n,
                "sessions": len(sessions),
                "export": await export(api, user, pid),
            }
            e = result["export"]
            print(f"  export: {e['bytes'] / 2**20:.1f} MiB in {e['seconds']:.2f} s "
                  f"({e['mib_per_s']} MiB/s, first byte {e['first_byte_ms']} ms), "
                  f"{e['messages']} messages, {e['memories']} memories; server RSS "
                  f"{e['server_rss_before_mib']} -> peak {e['server_rss_peak_mib']} MiB "
                  f"(+{e['server_rss_growth_mib']})")  # fmt: skip
            result["erase"] = await erase(api, user)
            r = result["erase"]
            print(f"  erase: {r['seconds']:.2f} s, receipt {r['counts']}, "
                  f"export afterwards {r['export_after']}")  # fmt: skip
            report[label] = result
    write_json(args.out, report)
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Strata base URL")
    p.add_argument("--api-key", default=None)
    p.add_argument("--out", type=Path, default=Path("bench/results/userdata.json"))
    p.add_argument("--pid", type=int, help="server pid for RSS (default: found by port)")
    p.add_argument("--messages", type=int, default=20_000, help="the large user's messages")
    p.add_argument("--small", type=int, default=2_000, help="the small user's messages")
    p.add_argument("--per-session", type=int, default=1_000, help="messages per session")
    p.add_argument("--batch", type=int, default=500, help="messages per ingest request")
    return p.parse_args(argv)


def main() -> int:
    return asyncio.run(main_async(parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
