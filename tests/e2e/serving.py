"""The real server as a process on a free port, for the end-to-end tests: one way to start
it, wait for it and stop it, whatever command starts it (`make run`, uvicorn, `strata serve`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any STRATA_ setting, plus `extra`."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")} | extra


def uvicorn(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "app.main:create_app",
        "--port",
        str(port),
    ]


@contextmanager
def serving(
    command: list[str], port: int, env: dict[str, str], log: Path, *, ready: str = "/readyz"
) -> Iterator[str]:
    """Runs `command` (which listens on `port`) until the block ends; yields its URL once
    `ready` answers 200. The log is in the assertion when it dies or never gets ready."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}{ready}", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
