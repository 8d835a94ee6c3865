"""Scale-out: the full stack's api and workers at 1 and at 2 processes, on PostgreSQL + Redis.

For each process count N (1, then 2) on a fresh PostgreSQL database, migrated once by
`python -m app.migrate`:
- the api as `uvicorn --workers N` (no worker inside, no migration at start, one
  PROMETHEUS_MULTIPROC_DIR), loaded by a lean raw-asyncio HTTP/1.1 client: single-message
  ingest (16 connections), then batches of 200 (4 connections); requests/s, messages/s,
  p50/p99 and the client's own CPU; then `/metrics` of one process must count every request
  of both;
- then N workers (`python -m app.worker`) drain the backlog those phases left: promotion
  messages/s over a fixed window.

No Qdrant server is reachable here, and the embedded index (Qdrant Edge) is one process per
shard, so this is the closest honest setup (docs/scaling.md): the api processes run with
qdrant-client's in-process `:memory:` index (ingest never searches it), and each worker writes
a Qdrant Edge shard of its own. With a Qdrant server both would share one collection; what is
measured here is the SQL, Redis and embedding work, which is what the processes divide.

Usage: python bench/scaleout.py [--pg postgresql://postgres@127.0.0.1:5432/postgres]
                                [--redis redis://127.0.0.1:6379/0] [--seconds 10]
                                [--qdrant http://host:6333]   (where a server is reachable)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import asyncpg
import httpx
import orjson
from benchlib import JSON, REPO_ROOT, fmt, machine_facts, print_machine, summarize, write_json


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def started(
    args: list[str], env: dict[str, str], log: Path, ready_url: str | None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("w") as out:
        proc = subprocess.Popen(
            args, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while ready_url is not None:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(args)} exited; see {log}")
            try:
                if httpx.get(ready_url, timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ready_url} not ready after 180 s; see {log}")
            time.sleep(0.3)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --------------------------------------------------------------------------- lean client


class Connection:
    """One keep-alive HTTP/1.1 connection: a request, then its whole answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def post(self, path: str, body: bytes) -> int:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


async def load(port: int, connections: int, seconds: float, batch: int, run: str) -> JSON:
    """`connections` closed loops, each on a session of its own, for `seconds`."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    messages = 0
    stop_at = time.monotonic() + seconds

    async def lane(i: int) -> None:
        nonlocal messages
        conn = await Connection.open(port)
        path = f"/v1/sessions/{run}-{batch}-{i}/messages"
        n = 0
        try:
            while time.monotonic() < stop_at:
                batch_msgs = [
                    {"role": "user", "content": f"Note {n + k} of lane {i}: the tram to Belém."}
                    for k in range(batch)
                ]
                n += batch
                body = orjson.dumps({"user_id": f"{run}-u{i % 4}", "messages": batch_msgs})
                start = time.perf_counter()
                status = await conn.post(path, body)
                latencies.append((time.perf_counter() - start) * 1000)
                statuses[status] = statuses.get(status, 0) + 1
                if status < 300:
                    messages += batch
        finally:
            conn.close()

    cpu0, wall0 = cpu_seconds(), time.monotonic()
    await asyncio.gather(*(lane(i) for i in range(connections)))
    wall = time.monotonic() - wall0
    return {
        "connections": connections,
        "batch": batch,
        "requests": len(latencies),
        "statuses": statuses,
        "requests_per_s": len(latencies) / wall,
        "messages_per_s": messages / wall,
        "latency_ms": summarize(latencies),
        "client_cpu_percent": 100 * (cpu_seconds() - cpu0) / wall,
    }


# --------------------------------------------------------------------------- phases


async def backlog(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval("SELECT coalesce(sum(last_seq - indexed_seq), 0) FROM sessions")
        return int(value)
    finally:
        await conn.close()


def counted_ingests(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, trust_env=False).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("strata_http_request_duration_seconds_count") and (
            'route="/v1/sessions/{session_id}/messages"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run_config(n: int, args: argparse.Namespace, admin_dsn: str, work: Path) -> JSON:
    name = f"strata_scaleout_{uuid.uuid4().hex[:8]}"
    asyncio.run(_create_db(admin_dsn, name))
    base = admin_dsn.rsplit("/", 1)[0]
    sql_dsn = f"{base}/{name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "STRATA_DATABASE_URL": sql_dsn.replace("postgresql://", "postgresql+asyncpg://", 1),
            "STRATA_REDIS_URL": args.redis,
            "STRATA_WORKER_IN_PROCESS": "false",
            "STRATA_AUTO_MIGRATE": "false",
            "STRATA_AUTH_MODE": "open",  # a loopback benchmark
            "STRATA_LOG_LEVEL": "WARNING",
        }
    )
    out: JSON = {"processes": n}
    try:
        subprocess.run([sys.executable, "-m", "app.migrate"], cwd=REPO_ROOT, env=env, check=True)
        metrics_dir = work / f"metrics-{n}"
        metrics_dir.mkdir()
        api_env = {
            **env,
            "STRATA_QDRANT_URL": args.qdrant or ":memory:",
            "STRATA_DATA_DIR": str(work / f"api-{n}"),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        }
        port = free_port()
        api = [
            sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app",
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(n), "--no-access-log",
        ]  # fmt: skip
        run = uuid.uuid4().hex[:6]
        with started(api, api_env, work / f"api-{n}.log", f"http://127.0.0.1:{port}/readyz"):
            time.sleep(2)  # every process of the pool up, not only the first to answer
            before = counted_ingests(port)
            single = asyncio.run(load(port, 16, args.seconds, 1, run))
            batched = asyncio.run(load(port, 4, args.seconds, 200, run))
            counted = counted_ingests(port) - before
        out["single"] = single
        out["batch200"] = batched
        sent = single["requests"] + batched["requests"]
        out["metrics_counted_requests"] = counted
        out["metrics_sent_requests"] = sent
        out["backlog_messages"] = asyncio.run(backlog(sql_dsn))

        with contextlib.ExitStack() as stack:
            for i in range(n):
                worker_env = {**env, "STRATA_DATA_DIR": str(work / f"worker-{n}-{i}")}
                # One shared collection, as in production; without a server each worker
                # writes an in-memory index of its own (a worker may not open an Edge shard).
                worker_env["STRATA_QDRANT_URL"] = args.qdrant or ":memory:"
                stack.enter_context(
                    started(
                        [sys.executable, "-m", "app.worker"],
                        worker_env,
                        work / f"worker-{n}-{i}.log",
                        None,
                    )
                )
            # From the first progress on (the model loads first), over a fixed window.
            start_backlog = asyncio.run(backlog(sql_dsn))
            deadline = time.monotonic() + 120
            while asyncio.run(backlog(sql_dsn)) == start_backlog:
                if time.monotonic() > deadline:
                    raise RuntimeError("no promotion progress in 120 s; see the worker logs")
                time.sleep(0.2)
            t0, b0 = time.monotonic(), asyncio.run(backlog(sql_dsn))
            time.sleep(args.promotion_seconds)
            t1, b1 = time.monotonic(), asyncio.run(backlog(sql_dsn))
        out["promotion_messages_per_s"] = (b0 - b1) / (t1 - t0)
        out["promotion_window_s"] = t1 - t0
        out["promotion_drained_all"] = b1 == 0
    finally:
        asyncio.run(_drop_db(admin_dsn, name))
    return out


async def _create_db(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _drop_db(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def print_report(rows: Sequence[JSON]) -> None:
    print(
        f"{'processes':>9s}  {'ingest 1 msg: req/s':>19s} {'p50':>6s} {'p99':>6s} {'cli CPU':>7s}"
        f"  {'batch 200: msg/s':>16s} {'p50':>6s} {'cli CPU':>7s}  {'promotion msg/s':>15s}"
    )
    for r in rows:
        s, b = r["single"], r["batch200"]
        print(
            f"{r['processes']:9d}  {s['requests_per_s']:19.0f} {fmt(s['latency_ms']['p50']):>6s} "
            f"{fmt(s['latency_ms']['p99']):>6s} {s['client_cpu_percent']:6.0f}%"
            f"  {b['messages_per_s']:16.0f} {fmt(b['latency_ms']['p50']):>6s} "
            f"{b['client_cpu_percent']:6.0f}%  {r['promotion_messages_per_s']:15.0f}"
        )
    for r in rows:
        print(
            f"{r['processes']} process(es): /metrics of one api process counted "
            f"{r['metrics_counted_requests']:.0f} of the {r['metrics_sent_requests']} ingest "
            f"requests sent; backlog before the workers {r['backlog_messages']} messages"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--qdrant", help="a Qdrant server's URL: every process then shares its collection"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per ingest phase")
    parser.add_argument("--promotion-seconds", type=float, default=30.0)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    facts = machine_facts()
    print_machine(facts)
    rows: list[JSON] = []
    with tempfile.TemporaryDirectory(prefix="strata-scaleout-") as tmp:
        for n in args.processes:
            rows.append(run_config(n, args, args.pg, Path(tmp)))
            print(f"{n} process(es) done", flush=True)
    print_report(rows)
    if args.out:
        write_json(args.out, {"machine": facts, "rows": rows, "seconds": args.seconds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
