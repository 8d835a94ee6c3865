"""Promotion's cache of line vectors: a slice's context turns are the last slice's new
turns, and are not embedded twice."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from app.core.chunking import LogMessage, chunk_turns
from app.services.indexing import LineCache, embed_chunks


class CountingEmbedder:
    """An embedding provider stand-in: a fixed vector per text, and the texts it was asked."""

    model_id = "counting"
    dim = 8
    local = True

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def embed(
        self, texts: Sequence[str], *, bulk: bool = False, query: bool = False
    ) -> list[list[float]]:
        self.asked.extend(texts)
        out = []
        for t in texts:
            v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(self.dim)
            out.append([float(x) for x in v / np.linalg.norm(v)])
        return out

    async def close(self) -> None:
        return None


def messages(start: int, end: int) -> list[LogMessage]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [LogMessage("s", i, None, "user", f"turn {i}", at, {}) for i in range(start, end)]


async def test_the_context_of_a_slice_is_not_embedded_again() -> None:
    embedder = CountingEmbedder()
    cache = LineCache(16)
    first = chunk_turns("t", "inc", [], messages(1, 3), dense_context=1, sparse_context=0)
    _, vectors_1, _ = await embed_chunks(embedder, first, 0.5, cache)
    assert embedder.asked == ["user: turn 1", "user: turn 2"]
    embedder.asked.clear()
    second = chunk_turns(
        "t", "inc", messages(2, 3), messages(3, 4), dense_context=1, sparse_context=0
    )
    _, vectors_2, _ = await embed_chunks(embedder, second, 0.5, cache)
    assert embedder.asked == ["user: turn 3"]  # turn 2, its context, came from the cache
    # The same vectors as without a cache.
    _, uncached, _ = await embed_chunks(CountingEmbedder(), second, 0.5)
    assert np.allclose(vectors_2, uncached)
    assert len(vectors_1) == 2


def test_the_cache_keeps_the_newest_lines() -> None:
    cache = LineCache(2)
    for i in range(3):
        cache.put(f"line {i}", np.array([float(i)]))
    assert cache.get("line 0") is None
    assert cache.get("line 2") is not None
