"""Fairness under a huge import: while user A imports 32 MB (1,000 messages of 32,000
characters), user B sends one message at a time with `wait=true`. Reports B's latency
(p50/p95/max), how many of B's waits were answered indexed (200) rather than timed out
(202), `/healthz` while it runs, the api's peak RSS, and A's promotion rate.

    .venv/bin/python bench/fairness.py                 # its own embedded server
    .venv/bin/python bench/fairness.py --url URL --pid PID
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    JSON,
    Api,
    embedded_server,
    fmt,
    machine_facts,
    process_memory,
    summarize,
    wait_ready,
    write_json,
)

WORDS = [
    *("memory", "agent", "session", "import", "archive", "page", "chapter", "record"),
    *("ledger", "invoice", "travel", "garden", "kitchen", "river", "mountain", "market"),
    *("lesson", "project", "meeting", "budget", "contract"),
]


def page(rng: random.Random, i: int, chars: int) -> str:
    words: list[str] = [f"page {i}:"]
    size = len(words[0])
    while size < chars:
        w = f"{rng.choice(WORDS)}{rng.randrange(1000)}"
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:chars]


async def run(args: argparse.Namespace, url: str, pid: int | None) -> JSON:
    rng = random.Random(args.seed)
    run_id = args.run_id or str(int(time.time()))
    a_user, a_session = f"fair-a-{run_id}", f"fair-import-{run_id}"
    b_user, b_session = f"fair-b-{run_id}", f"fair-chat-{run_id}"
    texts = [page(rng, i, args.chars) for i in range(args.messages)]
    stop = asyncio.Event()
    rss: list[float] = []
    healthz: list[float] = []
    b_latency: list[float] = []
    b_status: dict[str, int] = {"indexed": 0, "timed_out": 0, "error": 0}

    async with Api(url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 300):
            raise SystemExit("the server did not become ready")
        start_rss = process_memory(pid) if pid else None

        async def sample() -> None:
            while not stop.is_set():
                if pid and (mem := process_memory(pid)):
                    rss.append(mem["vmrss_mib"])
                t = time.perf_counter()
                with contextlib.suppress(Exception):
                    await api.client.get("/healthz")
                healthz.append((time.perf_counter() - t) * 1000)
                await asyncio.sleep(0.2)

        async def other_user() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                msg = [{"role": "user", "content": f"note {n}: my parking spot is {n % 40}"}]
                body, ms = await api.ingest(b_session, b_user, msg, wait=True)
                if body is None:
                    b_status["error"] += 1
                elif body.get("indexed_seq", 0) >= body["last_seq"]:
                    b_status["indexed"] += 1
                    b_latency.append(ms)
                else:
                    b_status["timed_out"] += 1
                    b_latency.append(ms)
                await asyncio.sleep(args.pause)

        samplers = [asyncio.create_task(sample()), asyncio.create_task(other_user())]
        await asyncio.sleep(2)  # B's idle baseline is part of the figures
        t0 = time.perf_counter()
        for start in range(0, len(texts), args.batch):
            part = texts[start : start + args.batch]
            messages = [
                {"id": f"p{start + i}", "role": "user", "content": t} for i, t in enumerate(part)
            ]
            body, _ = await api.ingest(a_session, a_user, messages, wait=False)
            if body is None:
                raise SystemExit(f"the import was refused: {api.errors.samples[-1:]}")
        accepted_s = time.perf_counter() - t0
        waited, _ = await api.request(
            "GET", f"/v1/sessions/{a_session}?user_id={a_user}&wait=true", "wait"
        )
        while waited is not None and waited["indexed_seq"] < waited["last_seq"]:
            waited, _ = await api.request(
                "GET", f"/v1/sessions/{a_session}?user_id={a_user}&wait=true", "wait"
            )
        indexed_s = time.perf_counter() - t0
        stop.set()
        await asyncio.gather(*samplers)
        end_rss = process_memory(pid) if pid else None

    total_chars = sum(len(t) for t in texts)
    return {
        "machine": machine_facts(),
        "import": {
            "messages": len(texts),
            "characters": total_chars,
            "batch": args.batch,
            "accepted_seconds": accepted_s,
            "indexed_seconds": indexed_s,
            "promotion_msg_per_s": len(texts) / indexed_s,
            "promotion_chars_per_s": total_chars / indexed_s,
        },
        "other_user_wait_ms": summarize(b_latency),
        "other_user_answers": b_status,
        "healthz_ms": summarize(healthz),
        "rss_mib": {
            "start": start_rss and start_rss.get("vmrss_mib"),
            "peak_sampled": max(rss) if rss else None,
            "peak_hwm": end_rss and end_rss.get("vmhwm_mib"),
        },
        "errors": api.errors.as_json(),
    }


def report(result: JSON) -> None:
    imp, b, h, rss = (
        result["import"],
        result["other_user_wait_ms"],
        result["healthz_ms"],
        result["rss_mib"],
    )
    print(
        f"import: {imp['messages']} messages, {imp['characters'] / 1e6:.1f} M characters, "
        f"accepted in {imp['accepted_seconds']:.1f} s, indexed in "
        f"{imp['indexed_seconds']:.1f} s ({imp['promotion_msg_per_s']:.1f} msg/s, "
        f"{imp['promotion_chars_per_s'] / 1e3:.0f} k chars/s)"
    )
    print(
        f"other user's wait=true (1 message): n={b['n']} p50 {fmt(b['p50'])} ms, "
        f"p95 {fmt(b['p95'])} ms, max {fmt(b['max'])} ms; answers {result['other_user_answers']}"
    )
    print(f"healthz: p50 {fmt(h['p50'])} ms, max {fmt(h['max'])} ms")
    print(
        f"api RSS: start {fmt(rss['start'])} MiB, peak {fmt(rss['peak_hwm'])} MiB "
        f"(sampled {fmt(rss['peak_sampled'])})"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--url", help="a running server (default: start an embedded one)")
    p.add_argument("--pid", type=int, help="the server's pid, for its RSS")
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--chars", type=int, default=32_000)
    p.add_argument("--batch", type=int, default=100, help="messages per import request")
    p.add_argument("--pause", type=float, default=0.2, help="seconds between B's messages")
    p.add_argument("--request-timeout", type=float, default=300)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--run-id")
    p.add_argument("--api-key")
    p.add_argument("--out", type=Path, default=Path("bench/results/fairness.json"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.url:
        result = asyncio.run(run(args, args.url, args.pid))
    else:
        log = args.out.with_suffix(".server.log")
        with embedded_server(log) as (url, pid):
            result = asyncio.run(run(args, url, pid))
    report(result)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
