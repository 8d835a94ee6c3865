"""How a turn becomes an index point: its chunk embedded with its neighbours' lines and
its terms weighted with theirs. Promotion writes points this way and the reindex job
rebuilds them this way, so a rebuilt index is the one promotion wrote."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core import terms
from app.core.chunking import Chunk, LogMessage, embedding_windows
from app.errors import EmbeddingRejected
from app.providers.embeddings import Embedder
from app.stores.models import Message
from app.stores.vectors import MemoryPayload, VectorPoint

log = logging.getLogger("strata.indexing")


@dataclass(frozen=True, slots=True)
class IndexConfig:
    """The settings a point is built with (app/settings.py; built in app/wiring.py): how
    many neighbouring turns it reads, and their weights."""

    dense_context_turns: int
    dense_context_weight: float
    dense_next_weight: float
    sparse_context_turns: int
    sparse_context_weight: float
    sparse_next_weight: float


def context_lookback(config: IndexConfig) -> int:
    """How many messages before a turn to read for its context: system messages are skipped
    by the chunker, so a little more than the context turns."""
    turns = max(config.dense_context_turns, config.sparse_context_turns)
    return turns * 3 + 2 if turns else 0


def context_lookahead(config: IndexConfig) -> int:
    """How many messages after a turn to read for the next turn (`Chunk.after`)."""
    return 5 if config.dense_next_weight > 0 or config.sparse_next_weight > 0 else 0


def log_message(row: Message) -> LogMessage:
    return LogMessage(
        row.session_id, row.seq, row.client_id, row.role, row.content, row.created_at, row.metadata_
    )


class LineCache:
    """The vectors of the last `size` lines embedded, by a digest of their text."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._vectors: OrderedDict[bytes, np.ndarray[Any, Any]] = OrderedDict()

    @staticmethod
    def _key(line: str) -> bytes:
        return hashlib.blake2b(line.encode(), digest_size=16).digest()

    def get(self, line: str) -> np.ndarray[Any, Any] | None:
        key = self._key(line)
        vector = self._vectors.get(key)
        if vector is not None:
            self._vectors.move_to_end(key)
        return vector

    def put(self, line: str, vector: np.ndarray[Any, Any]) -> None:
        self._vectors[self._key(line)] = vector
        self._vectors.move_to_end(self._key(line))
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)


async def embed_chunks(
    embedder: Embedder,
    chunks: list[Chunk],
    context_weight: float,
    cache: LineCache | None = None,
    next_weight: float = 0.0,
) -> tuple[list[Chunk], list[list[float]], dict[uuid.UUID, list[float]]]:
    """One embedding per distinct line; a chunk's vector blends in its context's, and the
    next turn's at `next_weight` times the turn's own share.

    Returns the chunks that could be embedded, their (blended) vectors, and each one's
    own line's vector (the point's `turn` vector): a line the provider refuses is
    skipped (it stays in the log), so one message cannot stall a session.
    """
    if not chunks:
        return [], [], {}

    def needed(c: Chunk) -> tuple[str, ...]:
        after = (c.after,) if c.after is not None and next_weight > 0 else ()
        return (*c.dense_context, c.content, *after)

    lines = list(dict.fromkeys(line for c in chunks for line in needed(c)))
    by_line: dict[str, np.ndarray[Any, Any]] = {}
    if cache is not None:
        for line in lines:
            if (known := cache.get(line)) is not None:
                by_line[line] = known
        lines = [line for line in lines if line not in by_line]
    try:
        fresh = await _embed_lines(embedder, lines) if lines else {}
    except EmbeddingRejected:
        fresh = {}
        for line in lines:
            try:
                fresh.update(await _embed_lines(embedder, [line]))
            except EmbeddingRejected:
                log.warning("embedding provider refused a message; it stays unindexed")
    by_line.update(fresh)
    if cache is not None:
        for line, vector in fresh.items():
            cache.put(line, vector)
    # ~0.15 ms a chunk: a 256-turn slice's blending held the event loop ~40 ms at a time,
    # which the api shares with an in-process worker (a thread yields the GIL every
    # switch interval; the loop's own code never does).
    return await asyncio.to_thread(_blend, chunks, by_line, context_weight, next_weight)


def _blend(
    chunks: list[Chunk],
    by_line: dict[str, np.ndarray[Any, Any]],
    w: float,
    next_weight: float,
) -> tuple[list[Chunk], list[list[float]], dict[uuid.UUID, list[float]]]:
    kept: list[Chunk] = []
    out: list[list[float]] = []
    turns: dict[uuid.UUID, list[float]] = {}
    for c in chunks:
        if c.content not in by_line:
            continue
        v = by_line[c.content]
        turns[c.id] = v.tolist()
        context_vectors = [by_line[line] for line in c.dense_context if line in by_line]
        share = 1.0
        if context_vectors and w > 0:
            share = 1 - w
            v = share * v + w * np.mean(np.stack(context_vectors), axis=0)
        if next_weight > 0 and c.after is not None and c.after in by_line:
            v = v + next_weight * share * by_line[c.after]
        norm = float(np.linalg.norm(v))
        kept.append(c)
        out.append((v / norm if norm else v).tolist())
    return kept, out, turns


async def warm_lines(embedder: Embedder, lines: list[str], cache: LineCache) -> int:
    """Embed the lines the cache does not hold into it; how many were embedded.

    Only a cache is filled: a line the provider refuses is left out, and whoever needs it
    embeds it again (and meets the refusal itself, as `embed_chunks` handles it)."""
    todo = [line for line in dict.fromkeys(lines) if cache.get(line) is None]
    if not todo:
        return 0
    try:
        fresh = await _embed_lines(embedder, todo)
    except EmbeddingRejected:
        return 0
    for line, vector in fresh.items():
        cache.put(line, vector)
    return len(fresh)


async def _embed_lines(embedder: Embedder, lines: list[str]) -> dict[str, np.ndarray[Any, Any]]:
    """Each line's vector, a long line's as the mean of its windows' (`embedding_windows`)."""
    windows = [embedding_windows(line) for line in lines]
    flat = [w for ws in windows for w in ws]
    vectors = await embedder.embed(flat, bulk=True)
    return await asyncio.to_thread(_arrays_by_line, lines, windows, vectors)


def _arrays_by_line(
    lines: list[str], windows: list[list[str]], embedded: list[list[float]]
) -> dict[str, np.ndarray[Any, Any]]:
    vectors = iter(embedded)
    by_line: dict[str, np.ndarray[Any, Any]] = {}
    for line, ws in zip(lines, windows, strict=True):
        if len(ws) == 1:
            by_line[line] = np.asarray(next(vectors), dtype=np.float32)
            continue
        mean = np.mean([np.asarray(next(vectors), dtype=np.float32) for _ in ws], axis=0)
        norm = float(np.linalg.norm(mean))
        by_line[line] = mean / norm if norm else mean
    return by_line


def chunk_point(
    point_id: uuid.UUID,
    chunk: Chunk,
    vector: list[float],
    turn: list[float] | None,
    payload: MemoryPayload,
    sparse_context_weight: float,
    sparse_next_weight: float = 0.0,
) -> VectorPoint:
    """A chunk's point: its embedded vectors, its terms with their context's at
    `sparse_context_weight`, and `payload`. Promotion and the reindex job both build points
    here, so a rebuilt index is the one promotion wrote."""
    after = [chunk.after] if chunk.after is not None else []
    sparse = terms.document_vector(
        chunk.content, chunk.sparse_context, sparse_context_weight, after, sparse_next_weight
    )
    return VectorPoint(point_id, vector, sparse, payload, turn)
