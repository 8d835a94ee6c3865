"""A lean closed-loop load client: raw asyncio HTTP/1.1 keep-alive connections, no HTTP
library, so the client's own cost stays small beside the server's on the same 2 cores
(httpx capped near 650 req/s here; this reaches several thousand). It reports its own CPU.

    run(host, port, "/v1/recall", bodies, clients=8, seconds=10)

Each of `clients` connections sends a request, waits for the whole answer, sends the next
(bodies taken round-robin from the list); latencies are client-side wall times.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class LoadResult:
    latencies_ms: list[float]
    errors: int
    seconds: float
    client_cpu_seconds: float
    first_error: str | None = None

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    @property
    def client_cpu_share(self) -> float:
        """The client's CPU time over wall time (1.0 = one core busy)."""
        return self.client_cpu_seconds / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        s = sorted(self.latencies_ms)
        return s[min(len(s) - 1, round((len(s) - 1) * q / 100))]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def encode(host: str, path: str, body: Any, headers: dict[str, str] | None = None) -> bytes:
    data = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    )
    return head.encode() + data


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value.strip())
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return status, bytes(body)
        body += await reader.readexactly(size + 2)
        del body[-2:]


async def run(
    host: str,
    port: int,
    path: str,
    bodies: Sequence[Any],
    *,
    clients: int,
    seconds: float | None = None,
    requests: int | None = None,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """Closed loop for `seconds` (or until `requests` answers in all)."""
    payloads = [encode(host, path, b, headers) for b in bodies]
    cycle = itertools.cycle(payloads)
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    deadline = time.perf_counter() + seconds if seconds else float("inf")
    budget = [requests if requests is not None else 1 << 62]

    async def client() -> None:
        nonlocal errors, first_error
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < deadline and budget[0] > 0:
                budget[0] -= 1
                start = time.perf_counter()
                writer.write(next(cycle))
                status, body = await read_response(reader)
                elapsed = (time.perf_counter() - start) * 1000
                if status >= 400:
                    errors += 1
                    first_error = first_error or f"{status} {body[:200]!r}"
                else:
                    latencies.append(elapsed)
        finally:
            writer.close()

    cpu0, t0 = _cpu(), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return LoadResult(latencies, errors, time.perf_counter() - t0, _cpu() - cpu0, first_error)
