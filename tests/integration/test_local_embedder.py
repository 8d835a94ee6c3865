"""The bundled encoder: batches of like lengths, answers in the caller's order."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from app.providers.embeddings import LocalUSE


@pytest.fixture(scope="module")
async def use() -> AsyncIterator[LocalUSE]:
    model = LocalUSE(bulk_threads=2)
    model.load()
    yield model
    await model.close()


async def test_vectors_come_back_in_the_callers_order(use: LocalUSE) -> None:
    texts = [
        "A much longer sentence about moving to Lisbon last May and loving the seafood there.",
        "hi",
        "我很喜欢这里的海鲜。",
        "Thanks!",
    ] * 20  # more than one batch
    together = np.asarray(await use.embed(texts, bulk=True))
    for query in (False, True):
        one_by_one = np.asarray([(await use.embed([t], bulk=query))[0] for t in texts[:4]])
        assert np.allclose(together[:4], one_by_one, atol=1e-4)
    assert np.allclose(together[:4], together[4:8], atol=1e-6)
    # Different texts, different vectors: the order really is the caller's.
    assert not np.allclose(together[0], together[1], atol=1e-2)


async def test_a_small_batch_split_over_the_threads_keeps_the_order(use: LocalUSE) -> None:
    """Ten texts go out as two calls, one per thread (`bulk_parts`)."""
    texts = [f"message {i}: " + "word " * (i * 7 % 11) for i in range(10)]
    together = np.asarray(await use.embed(texts, bulk=True))
    alone = np.asarray([(await use.embed([t], bulk=True))[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-4)
