"""What coroutines on two event loops of one process share: embedded, the api's loop and
its worker's, on a thread of its own (app/worker.py, `WorkerThread`). asyncio's own lock
and event belong to one loop: woken from another thread they wake nothing (or fail).

`TurnLock` is a lock the coroutines of any loop take in turn, first come first served,
without blocking their loop while they wait: the SQLite writer (app/stores/db.py) and the
embedded index's graph builds (app/stores/qdrant_edge.py). `Wakeup` is an event that any
thread may set, waited on by coroutines of the loop that waits on it.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from types import TracebackType


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running loop of this thread, or None (no loop runs here)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class TurnLock:
    """A FIFO lock for coroutines on any event loop of the process. A waiter waits on a
    future of its own loop; the holder that releases hands the lock to the first waiter
    directly (on its loop at once, on another through `call_soon_threadsafe`), so the lock
    changes hands the moment it is let go, as asyncio's does, and no loop blocks on it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # held for a few lines only, never across an await
        self._held = False
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )

    def locked(self) -> bool:
        return self._held

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return
            turn: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, turn))
        try:
            await turn
        except BaseException:  # cancelled, or a time-out: the turn is given up
            with self._mutex:
                handed = (loop, turn) not in self._waiters
                if not handed:
                    self._waiters.remove((loop, turn))
            # Handed over, and granted before the cancellation reached us: pass it on. Handed
            # but not granted yet: `_grant` sees the cancelled future and passes it on.
            if handed and turn.done() and not turn.cancelled():
                self.release()
            raise

    def release(self) -> None:
        """Let go; the next waiter (of any loop) holds the lock from here on."""
        here = running_loop()
        while True:
            with self._mutex:
                if not self._held:
                    raise RuntimeError("TurnLock released while not held")
                if not self._waiters:
                    self._held = False
                    return
                loop, turn = self._waiters.popleft()
            if loop is here:
                if not turn.done():
                    turn.set_result(None)
                    return
                continue  # cancelled meanwhile: the next one
            try:
                loop.call_soon_threadsafe(self._grant, turn)
                return
            except RuntimeError:  # that loop is closed: its waiter is gone
                continue

    def _grant(self, turn: asyncio.Future[None]) -> None:
        """On the waiter's loop: its turn, unless it gave up meanwhile."""
        if turn.done():
            self.release()
        else:
            turn.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        _exc_type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.release()


class Wakeup:
    """An `asyncio.Event` that any thread may set: the waiting loop (the last that waited
    or cleared it) is told through `call_soon_threadsafe`, never by touching its futures
    from another thread."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def set(self) -> None:
        loop = self._loop
        if loop is None or loop is running_loop():
            self._event.set()
            return
        try:
            loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop is closed: nobody waits
            self._event.set()

    def clear(self) -> None:
        self._loop = running_loop() or self._loop
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._event.wait()
