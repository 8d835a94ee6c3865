"""Wake-ups between ingest and the worker: "work arrived" (ingest → worker) and "a session is
indexed up to seq" (worker → the requests waiting for it).

Within one process they are events, set at once, from either of its event loops: the
api's, or its worker's on a thread of its own (app/worker.py), so each wakes its waiters on
the loop they wait on (`Wakeup`, `Watch._wake`). Across processes (the full stack:
api processes and separate workers) they also travel over Redis pub/sub: each process keeps
one subscription and sets its local events from it. A lost signal only delays: the worker
polls the log for backlog and a waiting request re-reads its watermark now and then, so
Redis down costs latency, never correctness. Publishing goes through the buffer's
`Breaker`, so a frozen Redis is skipped like everywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator

from redis.asyncio import Redis

from app.core import keys
from app.errors import BufferUnavailable
from app.stores.buffer import URGENT_WAKE, WAKE, Breaker, pubsub_channel
from app.stores.loops import Wakeup, running_loop

INDEXED = "indexed"

log = logging.getLogger("strata.signals")


class Watch:
    """One waiting request's view of a session's index: woken on each advance."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop = asyncio.get_running_loop()  # the waiting request's
        # The highest watermark a signal reported: a waiter whose target it reaches is
        # answered without reading the watermark again (the signal follows the commit).
        self.seq = 0

    def _wake(self, seq: int) -> None:
        if running_loop() is not self._loop:  # the worker's thread: the waiter's loop wakes it
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._wake, seq)
            return
        self.seq = max(self.seq, seq)
        self._event.set()

    async def wait(self, timeout: float) -> None:
        """Until the session's index advanced (since the last wait) or `timeout`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()


class Signals:
    """The process's hub of wake-ups; `redis` is None when everything runs in one process
    (embedded), then nothing is published or subscribed."""

    def __init__(self, redis: Redis | None, breaker: Breaker) -> None:
        self.redis = redis
        self.wake_channel = pubsub_channel(redis, WAKE)
        self.indexed_channel = pubsub_channel(redis, INDEXED)
        self.breaker = breaker
        self.work = Wakeup()  # set when messages arrived; the worker clears it
        # Set when a request waits for the index (`wait=true`): a worker pausing to gather a
        # trickle of messages into one pass (`worker_debounce_seconds`) goes on at once.
        self.urgent = Wakeup()
        self._watches: dict[tuple[str, str, str], set[Watch]] = {}
        # Requests add and drop their watches on the api's loop while the worker's thread
        # reads them (`_advanced`).
        self._watching = threading.Lock()
        self._task: asyncio.Task[None] | None = None

    # Local side.

    def work_arrived(self) -> None:
        """Messages arrived; the other processes' workers hear of it from the buffer's push
        (`Buffer.push`, `wake`; `urgent` when a request will wait for them)."""
        self.work.set()

    async def hurry(self) -> None:
        """A request waits for the index: the workers, here and in the other processes, stop
        gathering and promote now. Never raises: a lost signal costs one debounce at most."""
        self.work.set()
        self.urgent.set()
        if self.redis is None:
            return
        try:
            with self.breaker.guard():
                await self.redis.publish(self.wake_channel, URGENT_WAKE)
        except BufferUnavailable:
            log.debug("could not publish an urgent wake-up", exc_info=True)

    @contextlib.contextmanager
    def watch(self, tenant_id: str, user_id: str, session_id: str) -> Iterator[Watch]:
        """Register before reading the watermark, so that no advance falls in between."""
        key = (tenant_id, user_id, session_id)
        watch = Watch()
        with self._watching:
            self._watches.setdefault(key, set()).add(watch)
        try:
            yield watch
        finally:
            with self._watching:
                watches = self._watches.get(key)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._watches[key]

    def _advanced(self, tenant_id: str, user_id: str, session_id: str, seq: int) -> None:
        with self._watching:
            watches = list(self._watches.get((tenant_id, user_id, session_id), ()))
        for watch in watches:
            watch._wake(seq)

    # Across processes.

    async def indexed(self, tenant_id: str, user_id: str, session_id: str, seq: int) -> None:
        """The worker committed the session's watermark at `seq`: wake its waiters here and
        in the other processes. Never raises: a lost signal only delays a waiter."""
        self._advanced(tenant_id, user_id, session_id, seq)
        if self.redis is None:
            return
        try:
            with self.breaker.guard():
                await self.redis.publish(
                    self.indexed_channel, keys.indexed_message(tenant_id, user_id, session_id, seq)
                )
        except BufferUnavailable:
            log.debug("could not publish an index advance", exc_info=True)

    def start(self) -> None:
        """Subscribe (in the background) to the other processes' signals."""
        if self.redis is not None and self._task is None:
            self._task = asyncio.create_task(self._listen(self.redis), name="strata-signals")

    async def close(self) -> None:
        """Stops the subscription. A cancellation of the caller still propagates (awaiting
        the cancelled task directly would swallow it with the task's own), and a listener
        stuck in a frozen connection is left behind after 5 s rather than awaited forever."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5)
            self._task = None

    async def _listen(self, redis: Redis) -> None:
        while True:
            pubsub = redis.pubsub()
            try:
                await pubsub.subscribe(self.wake_channel, self.indexed_channel)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
                    if message is not None:
                        self._dispatch(message["channel"], message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis down or frozen: the polls cover; resubscribe later
                log.debug("signal subscription failed; retrying", exc_info=True)
                await asyncio.sleep(max(1.0, self.breaker.retry_seconds))
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]

    def _dispatch(self, channel: bytes | str, data: bytes | str) -> None:
        channel = channel.decode() if isinstance(channel, bytes) else channel
        if channel == self.wake_channel:
            self.work.set()
            raw = data.encode() if isinstance(data, str) else data
            if raw.startswith(URGENT_WAKE[:2]) and raw != URGENT_WAKE:  # another process's
                self.urgent.set()
            return
        text = data.decode() if isinstance(data, bytes) else data
        if (parsed := keys.parse_indexed(text)) is not None:
            self._advanced(*parsed)
