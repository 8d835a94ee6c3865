"""Micro-batching of query embeddings: the queries of concurrent requests share one model
call (bench/HISTORY.md, "Speed at scale").

One call to the bundled model costs about the same for one query as for eight (the forward
pass is dominated by fixed overhead at these lengths), so under load, embedding queries one
by one spends most of a core on that overhead. A query waits at most `wait_seconds` for
companions (by default none: only for the queries of requests already runnable in the event
loop), then goes with whatever has arrived; queries that arrive while a call runs form the
next call, so the wait only matters to the first query of an idle service, and there a
wait of 1 ms cost a sequential caller ~1 ms per recall and gained nothing with 8 clients
(bench/HISTORY.md, "Side by side with Mem0").

The batcher belongs to the first event loop that embeds through it (the api's): a query from
another loop (the worker's thread, app/worker.py) is embedded on its own, unbatched, since
the waiting futures and the running call are that first loop's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Vector = list[float]
EncodeBatch = Callable[[list[str]], Awaitable[list[Vector]]]


@dataclass
class BatchStats:
    """What the batcher did: model calls and the queries they carried (for tests, bench)."""

    calls: int = 0
    queries: int = 0
    sizes: list[int] = field(default_factory=list)


class QueryBatcher:
    """`await batcher.embed(text)` → its vector; calls `encode` with up to `max_batch`
    distinct texts at a time, one call at a time."""

    def __init__(self, encode: EncodeBatch, *, max_batch: int = 32, wait_seconds: float = 0.0):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._encode = encode
        self.max_batch = max_batch
        self.wait_seconds = wait_seconds
        self._waiting: dict[str, list[asyncio.Future[Vector]]] = {}
        self._runner: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stats = BatchStats()

    async def embed(self, text: str) -> Vector:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            # Rare (the worker's queries): a call of its own on the encoder's thread.
            vectors = await self._encode([text])
            if len(vectors) != 1:
                raise RuntimeError(f"encoder returned {len(vectors)} vectors for 1")
            return vectors[0]
        future: asyncio.Future[Vector] = loop.create_future()
        # The same text twice in a batch (context and recall of one turn) is embedded once.
        self._waiting.setdefault(text, []).append(future)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        while self._waiting:
            if len(self._waiting) < self.max_batch:
                # Let requests already in the event loop's queue add their queries.
                await asyncio.sleep(self.wait_seconds)
            texts = list(self._waiting)[: self.max_batch]
            futures = [self._waiting.pop(t) for t in texts]
            self.stats.calls += 1
            self.stats.queries += len(texts)
            self.stats.sizes.append(len(texts))
            try:
                vectors = await self._encode(texts)
                if len(vectors) != len(texts):
                    raise RuntimeError(f"encoder returned {len(vectors)} vectors for {len(texts)}")
            except BaseException as exc:
                for waiters in futures:
                    for f in waiters:
                        if not f.done():
                            f.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for vector, waiters in zip(vectors, futures, strict=True):
                for f in waiters:
                    if not f.done():
                        f.set_result(vector)
