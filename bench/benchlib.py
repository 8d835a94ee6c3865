"""Shared pieces of the benchmark scripts: machine facts, percentiles, an HTTP client that
records every error, index-watermark polling and the server's resident memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent

JSON = dict[str, Any]
T = TypeVar("T")
R = TypeVar("R")


# --------------------------------------------------------------------------- machine facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_mib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return None


def _git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{'-dirty' if dirty else ''}"


def machine_facts() -> JSON:
    load: tuple[float, ...] | None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "cpu_model": _cpu_model(),
        "nproc": os.cpu_count(),
        "ram_mib": _ram_mib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": _git_commit(),
        "load_average_at_start": load,
        "started_at_unix": time.time(),
    }


def print_machine(facts: JSON) -> None:
    load = facts["load_average_at_start"]
    load_text = " ".join(f"{x:.2f}" for x in load) if load else "n/a"
    print(
        f"machine: {facts['cpu_model']} | nproc {facts['nproc']} | RAM {facts['ram_mib']} MiB"
        f" | Python {facts['python']} | load {load_text}"
    )
    print(f"git commit: {facts['git_commit']}")


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> JSON:
    return {
        "n": len(values),
        "mean": sum(values) / len(values) if values else None,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


# --------------------------------------------------------------------------- HTTP


@dataclass
class ErrorLog:
    """Every non-2xx answer and transport failure, counted, with the first few bodies kept."""

    counts: Counter[str] = field(default_factory=Counter)
    samples: list[JSON] = field(default_factory=list)
    max_samples: int = 20

    def record(self, what: str, key: str, detail: str) -> None:
        self.counts[f"{what} {key}"] += 1
        if len(self.samples) < self.max_samples:
            self.samples.append({"request": what, "status": key, "detail": detail[:500]})

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_json(self) -> JSON:
        return {"counts": dict(self.counts), "samples": self.samples}

    def print(self) -> None:
        if not self.counts:
            print("errors: none")
            return
        print(f"errors: {self.total}")
        for key, n in self.counts.most_common():
            print(f"  {n:6d}  {key}")
        for sample in self.samples[:5]:
            print(f"  e.g. {sample['request']} -> {sample['status']}: {sample['detail'][:200]}")


class Api:
    """A thin client for the Strata endpoints the benchmarks use; never raises on HTTP errors,
    it records them and returns None."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
            trust_env=False,  # never route through a proxy from the environment
        )
        self.errors = ErrorLog()

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def request(
        self, method: str, path: str, what: str, body: JSON | None = None
    ) -> tuple[JSON | None, float]:
        """One call; answers (json or None on error, client-side milliseconds)."""
        start = time.perf_counter()
        try:
            resp = await self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            elapsed = (time.perf_counter() - start) * 1000
            self.errors.record(what, type(exc).__name__, str(exc))
            return None, elapsed
        elapsed = (time.perf_counter() - start) * 1000
        if resp.status_code >= 400:
            self.errors.record(what, str(resp.status_code), resp.text)
            return None, elapsed
        data: JSON = resp.json()
        return data, elapsed

    async def ingest(
        self, session_id: str, user_id: str, messages: list[JSON], wait: bool
    ) -> tuple[JSON | None, float]:
        body = {"user_id": user_id, "messages": messages, "wait": wait}
        return await self.request("POST", f"/v1/sessions/{session_id}/messages", "ingest", body)

    async def session(self, session_id: str, user_id: str) -> JSON | None:
        data, _ = await self.request(
            "GET", f"/v1/sessions/{session_id}?user_id={user_id}", "get-session"
        )
        return data

    async def recall(self, body: JSON) -> tuple[JSON | None, float]:
        return await self.request("POST", "/v1/recall", "recall", body)

    async def context(self, session_id: str, body: JSON) -> tuple[JSON | None, float]:
        return await self.request("POST", f"/v1/sessions/{session_id}/context", "context", body)


async def run_pool(
    items: Sequence[T], worker: Callable[[T], Awaitable[R]], concurrency: int
) -> list[R]:
    """Run `worker` over `items` with at most `concurrency` in flight; answers in input order."""
    results: list[R] = []
    slots: dict[int, R] = {}
    next_index = 0

    async def lane() -> None:
        nonlocal next_index
        while next_index < len(items):
            i = next_index
            next_index += 1
            slots[i] = await worker(items[i])

    await asyncio.gather(*(lane() for _ in range(max(1, concurrency))))
    results.extend(slots[i] for i in sorted(slots))
    return results


async def wait_ready(api: Api, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            resp = await api.client.get("/readyz")
            if resp.status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)
    return False


async def wait_indexed(
    api: Api, sessions: Sequence[tuple[str, str]], timeout: float, poll: float = 0.2
) -> tuple[bool, float]:
    """Wait until every (session_id, user_id) has indexed_seq == last_seq.

    Sessions are checked one at a time, in order, so polling costs the server one cheap GET
    per interval rather than one per session. Answers (all caught up, seconds waited)."""
    start = time.monotonic()
    deadline = start + timeout
    for session_id, user_id in sessions:
        while True:
            info = await api.session(session_id, user_id)
            if info is not None and info["indexed_seq"] >= info["last_seq"]:
                break
            if time.monotonic() >= deadline:
                return False, time.monotonic() - start
            await asyncio.sleep(poll)
    return True, time.monotonic() - start


# --------------------------------------------------------------------------- process memory


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10:
                continue
            local, state, inode = parts[1], parts[3], parts[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def find_listening_pid(port: int) -> int | None:
    """The process holding a listening socket on `port`, found through /proc."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                try:
                    if os.readlink(fd) in targets:
                        return int(entry.name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def process_memory(pid: int) -> JSON | None:
    """VmRSS, VmHWM (peak RSS), and RssAnon / RssFile (the heap, and the pages of mapped
    files: the index's segments and WAL, the model's weights, which the kernel may drop and
    read again) in MiB from /proc/<pid>/status."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out: JSON = {"pid": pid}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key.lower() + "_mib"] = int(rest.split()[0]) / 1024
    return out


# --------------------------------------------------------------------------- output


def write_json(path: Path, data: JSON) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    print(f"wrote {path}")


# --------------------------------------------------------------------------- a server of its own


@contextlib.contextmanager
def embedded_server(log_path: Path, **env: str) -> Iterator[tuple[str, int]]:
    """A fresh embedded server (temporary data dir, free port) for one benchmark: yields its
    (base URL, pid); stopped and its data removed afterwards. `env`: extra STRATA_* values."""
    data_dir = Path(tempfile.mkdtemp(prefix="strata-bench-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    clean.update({"STRATA_DATA_DIR": str(data_dir), **env})
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"),
                *("--host", "127.0.0.1", "--port", str(port)),
            ],
            cwd=REPO_ROOT,
            env=clean,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
