"""A small Chrome DevTools Protocol client over `websockets`, for Debian's `chromium`
(/usr/bin/chromium): no downloaded browser, no driver. It starts a headless browser on a
fresh profile, opens one page, and keeps every event it receives (the network's too), so a
test can read what the page loaded.

    with Browser.start() as browser:
        browser.goto("http://127.0.0.1:8000/console/")
        browser.eval("document.title")
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
]


class Browser:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    @classmethod
    @contextmanager
    def start(cls, width: int = 1280, height: int = 800) -> Iterator[Browser]:
        if not Path(CHROMIUM).exists():
            raise RuntimeError(
                f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y "
                "chromium`; .ci/run does it) to run the console's browser test"
            )
        profile = tempfile.mkdtemp(prefix="strata-chromium-")
        proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = _devtools_port(Path(profile), proc)
            pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            page = next(p for p in pages if p["type"] == "page")
            with connect(page["webSocketDebuggerUrl"], max_size=2**26, proxy=None) as ws:
                browser = cls(ws)
                browser.call("Page.enable")
                browser.call("Network.enable")
                browser.call("Runtime.enable")
                browser.call(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                )
                yield browser
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            shutil.rmtree(profile, ignore_errors=True)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one command and wait for its answer (events that come first are kept)."""
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def wait_for(self, event: str, after: int) -> dict[str, Any]:
        """The first `event` from the `after`-th kept event on."""
        while True:
            for message in self.events[after:]:
                if message["method"] == event:
                    return message
            after = len(self.events)
            message = json.loads(self.ws.recv(timeout=60))
            if "method" in message:
                self.events.append(message)

    def goto(self, url: str) -> None:
        mark = len(self.events)
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired", mark)

    def eval(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def submit(self, expression: str) -> None:
        """Run `expression` (which submits a form or clicks a link) and wait for the page
        it loads."""
        mark = len(self.events)
        self.eval(expression)
        self.wait_for("Page.loadEventFired", mark)

    def requested_urls(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes]) -> int:
    """Chromium writes the port it chose (`--remote-debugging-port=0`) into the profile."""
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}")
        if active.exists():
            first = active.read_text().split("\n", 1)[0].strip()
            if first.isdigit():
                return int(first)
        time.sleep(0.1)
    raise RuntimeError("chromium did not open its DevTools port within 60 s")
