"""The query batcher: concurrent queries share model calls, each gets its own vector."""

from __future__ import annotations

import asyncio

import pytest

from app.providers.batching import QueryBatcher


class FakeModel:
    """Encodes a text as [len, first char code]; records each call's texts."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[list[str]] = []
        self.delay = delay

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(self.delay)
        return [[float(len(t)), float(ord(t[0]))] for t in texts]


async def test_concurrent_queries_share_one_call_and_get_their_own_vectors() -> None:
    model = FakeModel()
    batcher = QueryBatcher(model, max_batch=32, wait_seconds=0.005)
    texts = [f"q{i}" * (i + 1) for i in range(10)]
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    assert vectors == [[float(len(t)), float(ord(t[0]))] for t in texts]
    assert len(model.calls) == 1
    assert sorted(model.calls[0]) == sorted(texts)


async def test_with_no_wait_requests_already_runnable_still_share_one_call() -> None:
    """The default: a query does not wait on the clock, but the queries of requests the
    event loop already holds go in the same call."""
    model = FakeModel()
    batcher = QueryBatcher(model, max_batch=32)
    texts = [f"query {i}" for i in range(8)]
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    assert [v[0] for v in vectors] == [float(len(t)) for t in texts]
    assert len(model.calls) == 1


async def test_batches_never_exceed_max_batch() -> None:
    model = FakeModel()
    batcher = QueryBatcher(model, max_batch=4, wait_seconds=0.001)
    texts = [f"text {i}" for i in range(10)]
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    assert [v[0] for v in vectors] == [float(len(t)) for t in texts]
    assert [len(c) for c in model.calls] == [4, 4, 2]
    assert batcher.stats.queries == 10
    assert batcher.stats.calls == 3


async def test_queries_arriving_during_a_call_form_the_next_call() -> None:
    model = FakeModel(delay=0.05)
    batcher = QueryBatcher(model, max_batch=32, wait_seconds=0.0)
    first = asyncio.create_task(batcher.embed("first"))
    await asyncio.sleep(0.01)  # the first call is running now
    later = [asyncio.create_task(batcher.embed(f"later {i}")) for i in range(5)]
    await asyncio.gather(first, *later)
    assert model.calls[0] == ["first"]
    assert sorted(model.calls[1]) == sorted(f"later {i}" for i in range(5))
    assert len(model.calls) == 2


async def test_the_same_text_twice_is_embedded_once() -> None:
    model = FakeModel()
    batcher = QueryBatcher(model, max_batch=8, wait_seconds=0.001)
    a, b, c = await asyncio.gather(batcher.embed("same"), batcher.embed("same"), batcher.embed("x"))
    assert a == b == [4.0, float(ord("s"))]
    assert c == [1.0, float(ord("x"))]
    assert sorted(model.calls[0]) == ["same", "x"]


async def test_a_failed_call_fails_its_queries_and_the_next_call_still_runs() -> None:
    calls = 0

    async def flaky(texts: list[str]) -> list[list[float]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("model crashed")
        return [[1.0] for _ in texts]

    batcher = QueryBatcher(flaky, max_batch=8, wait_seconds=0.001)
    results = await asyncio.gather(batcher.embed("a"), batcher.embed("b"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await batcher.embed("c") == [1.0]


async def test_a_wrong_number_of_vectors_is_an_error_not_a_mixup() -> None:
    async def short(texts: list[str]) -> list[list[float]]:
        return [[1.0]]

    batcher = QueryBatcher(short, max_batch=8, wait_seconds=0.001)
    with pytest.raises(RuntimeError, match="vectors"):
        await asyncio.gather(batcher.embed("a"), batcher.embed("b"))


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        QueryBatcher(FakeModel(), max_batch=0)
