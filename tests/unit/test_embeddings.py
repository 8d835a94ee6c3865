"""The OpenAI-compatible embedding provider, against httpx.MockTransport."""

from __future__ import annotations

import json

import httpx
import pytest

from app.errors import EmbeddingRejected, ProviderTimeout, Unavailable
from app.providers.embeddings import OpenAIEmbedder, bulk_parts


def embedder(handler: httpx.MockTransport, dim: int = 3) -> OpenAIEmbedder:
    client = httpx.AsyncClient(transport=handler, base_url="http://embeddings.test")
    return OpenAIEmbedder(client, model="tiny", dim=dim, retries=2)


async def test_vectors_come_back_in_input_order_and_in_batches() -> None:
    seen: list[list[str]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.url.path == "/v1/embeddings"
        assert body["model"] == "tiny"
        seen.append(body["input"])
        data = [
            {"index": i, "embedding": [float(len(t)), 0.0, 1.0]}
            for i, t in enumerate(body["input"])
        ]
        return httpx.Response(200, json={"data": list(reversed(data))})

    e = embedder(httpx.MockTransport(handle))
    e.batch_size = 2
    vectors = await e.embed(["a", "bbb", "cc"])
    assert [v[0] for v in vectors] == [1.0, 3.0, 2.0]
    assert seen == [["a", "bbb"], ["cc"]]
    await e.close()


async def test_server_errors_are_retried_then_reported() -> None:
    calls = 0

    def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            return httpx.Response(503)
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0, 2.0, 3.0]}]})

    assert await embedder(httpx.MockTransport(flaky)).embed(["x"]) == [[1.0, 2.0, 3.0]]
    assert calls == 3

    down = embedder(httpx.MockTransport(lambda r: httpx.Response(500)))
    with pytest.raises(Unavailable):
        await down.embed(["x"])


async def test_a_refused_input_is_not_retried() -> None:
    calls = 0

    def refuse(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(400, json={"error": "too many tokens"})

    with pytest.raises(EmbeddingRejected):
        await embedder(httpx.MockTransport(refuse)).embed(["x" * 100])
    assert calls == 1

    # A wrong key is the operator's problem, not the caller's input: unavailable.
    with pytest.raises(Unavailable):
        await embedder(httpx.MockTransport(lambda r: httpx.Response(401))).embed(["x"])


async def test_wrong_shapes_and_timeouts_are_errors_not_garbage() -> None:
    short = embedder(
        httpx.MockTransport(
            lambda r: httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0]}]})
        )
    )
    with pytest.raises(Unavailable, match="wrong shape"):
        await short.embed(["x"])

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("too slow", request=request)

    with pytest.raises(ProviderTimeout):
        await embedder(httpx.MockTransport(slow)).embed(["x"])


@pytest.mark.parametrize(
    ("n", "batch_size", "threads", "calls"),
    [
        (10, 64, 2, 2),
        (3, 64, 2, 1),
        (1, 64, 2, 1),
        (10, 64, 1, 1),
        (128, 64, 2, 2),
        (300, 64, 2, 5),
    ],
)
def test_bulk_parts_cover_each_text_once_by_length(
    n: int, batch_size: int, threads: int, calls: int
) -> None:
    lengths = [(i * 37) % 101 for i in range(n)]
    parts = bulk_parts(lengths, batch_size, threads)
    assert len(parts) == calls
    assert sorted(i for part in parts for i in part) == list(range(n))
    assert all(len(part) <= batch_size for part in parts)
    # By length across the calls, so none is padded beyond what one call would be.
    flat = [lengths[i] for part in parts for i in part]
    assert flat == sorted(flat)


def test_a_document_prefix_is_part_of_the_model_id() -> None:
    """Another prefix gives other stored vectors: a new collection, never a mix."""
    client = httpx.AsyncClient(base_url="http://embeddings.test")
    plain = OpenAIEmbedder(client, model="e5", dim=3)
    prefixed = OpenAIEmbedder(client, model="e5", dim=3, document_prefix="passage: ")
    other = OpenAIEmbedder(client, model="e5", dim=3, document_prefix="doc: ")
    queried = OpenAIEmbedder(client, model="e5", dim=3, query_prefix="query: ")
    assert plain.model_id == queried.model_id == "openai-e5"
    assert len({plain.model_id, prefixed.model_id, other.model_id}) == 3
