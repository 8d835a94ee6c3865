"""Imports: how long `wait=true` takes for a 10-message batch on an idle service, and how
fast a bulk import is indexed when it does not wait batch by batch.

(a) idle: `--waits` batches of 10 messages, one after the other, each with `wait=true`:
    p50/p95 of the answer (the batch is searchable when it comes).
(b) sequential importer: `--sequential` messages in 10-message `wait=true` batches (how an
    importer that waits on every batch runs): messages/s.
(c) bulk import: `--bulk` messages in batches of `--batch-size` with `wait=false`, then one
    `GET /v1/sessions/{id}?wait=true`: messages/s from the first send to all indexed.

    .venv/bin/python bench/imports.py                  # its own embedded server
    .venv/bin/python bench/imports.py --url URL
"""

from __future__ import annotations

import argparse
import asyncio
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
    summarize,
    wait_ready,
    write_json,
)
from latency import make_messages


async def run(args: argparse.Namespace, url: str) -> JSON:
    rng = random.Random(args.seed)
    run_id = args.run_id or str(int(time.time()))
    out: JSON = {"machine": machine_facts()}
    async with Api(url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 300):
            raise SystemExit("the server did not become ready")
        # A few unmeasured calls: the first promotion loads what it loads lazily.
        for i in range(3):
            await api.ingest(
                f"warm-{run_id}", f"warm-{run_id}", make_messages(rng, f"w{i}", 10), True
            )

        user = f"imports-{run_id}"
        waits: list[float] = []
        unindexed = 0
        for i in range(args.waits):
            body, ms = await api.ingest(
                f"idle-{run_id}", user, make_messages(rng, f"i{i}", 10), True
            )
            waits.append(ms)
            if body is None or body.get("indexed_seq", 0) < body["last_seq"]:
                unindexed += 1
            await asyncio.sleep(args.pause)
        out["idle_wait_10"] = {**summarize(waits), "not_indexed": unindexed}

        t0 = time.perf_counter()
        for i in range(0, args.sequential, 10):
            await api.ingest(f"seq-{run_id}", user, make_messages(rng, f"s{i}", 10), True)
        seconds = time.perf_counter() - t0
        out["sequential_wait"] = {
            "messages": args.sequential,
            "seconds": seconds,
            "msg_per_s": args.sequential / seconds,
        }

        session = f"bulk-{run_id}"
        t0 = time.perf_counter()
        for i in range(0, args.bulk, args.batch_size):
            count = min(args.batch_size, args.bulk - i)
            body, _ = await api.ingest(session, user, make_messages(rng, f"b{i}", count), False)
            if body is None:
                raise SystemExit(f"bulk batch refused: {api.errors.samples[-1:]}")
        sent = time.perf_counter() - t0
        path = f"/v1/sessions/{session}?user_id={user}&wait=true"
        info, _ = await api.request("GET", path, "wait")
        while info is not None and info["indexed_seq"] < info["last_seq"]:
            info, _ = await api.request("GET", path, "wait")
        indexed = time.perf_counter() - t0
        out["bulk"] = {
            "messages": args.bulk,
            "batch_size": args.batch_size,
            "accepted_seconds": sent,
            "accepted_msg_per_s": args.bulk / sent,
            "indexed_seconds": indexed,
            "indexed_msg_per_s": args.bulk / indexed,
        }
        out["errors"] = api.errors.as_json()
    return out


def report(result: JSON) -> None:
    idle, seq, bulk = result["idle_wait_10"], result["sequential_wait"], result["bulk"]
    print(
        f"(a) wait=true, 10 messages, idle: n={idle['n']} p50 {fmt(idle['p50'])} ms, "
        f"p95 {fmt(idle['p95'])} ms, max {fmt(idle['max'])} ms; not indexed: "
        f"{idle['not_indexed']}"
    )
    print(
        f"(b) importer waiting on every 10-message batch: {seq['messages']} messages in "
        f"{seq['seconds']:.1f} s = {seq['msg_per_s']:.0f} msg/s"
    )
    print(
        f"(c) bulk import, {bulk['messages']} messages in batches of {bulk['batch_size']}, "
        f"one wait: accepted {bulk['accepted_msg_per_s']:.0f} msg/s, indexed in "
        f"{bulk['indexed_seconds']:.1f} s = {bulk['indexed_msg_per_s']:.0f} msg/s"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--url", help="a running server (default: start an embedded one)")
    p.add_argument("--waits", type=int, default=100, help="(a) batches")
    p.add_argument("--pause", type=float, default=0.05, help="(a) seconds between batches")
    p.add_argument("--sequential", type=int, default=500, help="(b) messages")
    p.add_argument("--bulk", type=int, default=5000, help="(c) messages")
    p.add_argument("--batch-size", type=int, default=200, help="(c) messages per request")
    p.add_argument("--request-timeout", type=float, default=300)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--run-id")
    p.add_argument("--api-key")
    p.add_argument("--out", type=Path, default=Path("bench/results/imports.json"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.url:
        result = asyncio.run(run(args, args.url))
    else:
        with embedded_server(args.out.with_suffix(".server.log")) as (url, _pid):
            result = asyncio.run(run(args, url))
    report(result)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
