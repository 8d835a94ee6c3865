"""Recall of two checkouts side by side on the same seeded data: a before/after comparison
that the machine's own drift cannot decide.

    python bench/ab_recall.py --before CHECKOUT --after CHECKOUT --data-dir DIR \\
        [--user bench-user] [--rounds 4] [--clients 1,8,16] [--seconds 6]

Both servers run at once, each on its own copy of `--data-dir` (a directory seeded by
`seed.py`), started from each checkout (with its `.venv` if it has one, else this
interpreter) and left to settle; then the lean load client (`loadgen.py`) alternates
between them, cell by cell, for `--rounds` rounds, so that a slow spell of a shared machine
falls on both. Prints each cell (p50 / p95 / p99 client-side, answers per second, the
server's CPU per answer) and the medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import machine_facts, print_machine
from latency import query_text
from loadgen import run
from scale import Server, cpu_seconds, settle


async def one_cell(
    server: Server, user: str, clients: int, seconds: float, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    bodies = [{"user_id": user, "query": query_text(rng), "top_k": 10} for _ in range(3000)]
    await run("127.0.0.1", server.port, "/v1/recall", bodies[-50:], clients=2, requests=50)
    c0 = cpu_seconds(server.proc.pid)
    res = await run("127.0.0.1", server.port, "/v1/recall", bodies, clients=clients,
                    seconds=seconds)  # fmt: skip
    cpu = cpu_seconds(server.proc.pid) - c0
    n = len(res.latencies_ms)
    return {
        "p50": res.percentile(50),
        "p95": res.percentile(95),
        "p99": res.percentile(99),
        "rate": res.rate,
        "cpu_ms": 1000 * cpu / n if n else float("nan"),
        "errors": res.errors,
    }


def fmt(c: dict[str, Any]) -> str:
    return (
        f"p50 {c['p50']:.1f} / p95 {c['p95']:.1f} / p99 {c['p99']:.1f} ms · {c['rate']:.0f}/s"
        f" · CPU {c['cpu_ms']:.1f} ms/answer" + (f" · {c['errors']} errors" if c["errors"] else "")
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--before", type=Path, required=True)
    p.add_argument("--after", type=Path, required=True)
    p.add_argument("--data-dir", type=Path, required=True, help="seeded by seed.py")
    p.add_argument("--user", default="bench-user")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--clients", default="1,8,16")
    p.add_argument("--seconds", type=float, default=6)
    args = p.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    print_machine(machine_facts())
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="strata-ab.") as tmp:
        servers = {}
        try:
            for label, repo in (("before", args.before), ("after", args.after)):
                data = Path(tmp) / label
                shutil.copytree(args.data_dir, data)
                servers[label] = Server(repo.resolve(), data, Path(tmp) / f"{label}.log")
            for label, server in servers.items():
                print(f"{label}: idle after {settle(server.proc.pid, 600):.0f} s", flush=True)
            for r in range(args.rounds):
                for c in clients:
                    for label, server in servers.items():
                        cell = asyncio.run(one_cell(server, args.user, c, args.seconds, r))
                        cells.setdefault((label, c), []).append(cell)
                        print(f"round {r + 1} {label:6s} {c:2d} clients: {fmt(cell)}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print("\nmedians over the rounds:")
    for c in clients:
        for label in ("before", "after"):
            rounds = cells[(label, c)]
            med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
            print(f"  {label:6s} {c:2d} clients: {fmt(med)}")


if __name__ == "__main__":
    main()
