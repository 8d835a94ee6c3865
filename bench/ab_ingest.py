"""One-message ingest of two checkouts, A/B: the service level "ingest, one message per
request" (p50 ≤ 5 ms, p99 ≤ 20 ms) measured as `latency.py`'s phase (a) does it, on
alternating fresh embedded servers, so that a shared machine's slow spells fall on both.

    python bench/ab_ingest.py --before CHECKOUT --after CHECKOUT [--rounds 3]
        [--requests 1000] [--out FILE]

Each round starts one server per checkout in turn (`scale.Server`: a fresh data directory,
`--no-access-log`), waits until it is idle, sends `--requests` messages one per request
from one client (`wait=false`; the in-process worker promotes them as they come, which is
what the p99 is about), and stops it. Printed per run: p50 / p99 / max and requests/s;
then the medians of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Api, machine_facts, print_machine, wait_ready
from latency import single_ingest
from scale import Server, settle


async def one_run(port: int, requests: int, seed: int) -> dict[str, Any]:
    async with Api(f"http://127.0.0.1:{port}", None, 60) as api:
        if not await wait_ready(api, 60):
            raise RuntimeError("server not ready")
        start = time.monotonic()
        found = await single_ingest(api, random.Random(seed), f"ab-{seed}", requests)
        found["seconds"] = time.monotonic() - start
        return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--before", type=Path, required=True)
    p.add_argument("--after", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    print_machine(machine_facts())
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="ab-ingest-") as tmp:
        for r in range(args.rounds):
            for label, repo in (("before", args.before), ("after", args.after)):
                data = Path(tmp) / f"{label}-{r}"
                server = Server(repo.resolve(), data, Path(tmp) / f"{label}-{r}.log")
                try:
                    settle(server.proc.pid, 60)
                    run = asyncio.run(one_run(server.port, args.requests, seed=r))
                finally:
                    server.stop()
                lat = run["latency_ms"]
                rate = args.requests / run["seconds"]
                print(
                    f"round {r + 1} {label:6s}: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms,"
                    f" max {lat['max']:.1f} ms, {rate:.0f} req/s, failed {run['failed']}"
                )
                runs[label].append(run)
    for label, found in runs.items():
        p50 = statistics.median(x["latency_ms"]["p50"] for x in found)
        p99 = statistics.median(x["latency_ms"]["p99"] for x in found)
        print(f"{label:6s} medians: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    if args.out:
        args.out.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
