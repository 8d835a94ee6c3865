"""The OpenAI-compatible embedding path, end to end, against a local stub server."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from tests.conftest import Running, embedded_settings, post_messages, recall, turn
from tests.stubs import serve

DIM = 8


def _vector(text: str) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words point alike."""
    v = [0.0] * DIM
    for word in text.lower().split():
        v[hashlib.sha256(word.encode()).digest()[0] % DIM] += 1.0
    norm = sum(x * x for x in v) ** 0.5 or 1.0
    return [x / norm for x in v]


def stub_app(calls: list[list[str]]) -> FastAPI:
    stub = FastAPI()

    @stub.post("/v1/embeddings")
    async def embeddings(body: dict[str, Any]) -> Any:
        texts: list[str] = body["input"]
        calls.append(texts)
        if any("REFUSE" in t for t in texts):
            return JSONResponse({"error": {"message": "input too long"}}, status_code=400)
        return {"data": [{"index": i, "embedding": _vector(t)} for i, t in enumerate(texts)]}

    return stub


@pytest.fixture
async def stub_url() -> AsyncIterator[tuple[str, list[list[str]]]]:
    calls: list[list[str]] = []
    async with serve(stub_app(calls)) as url:
        yield url, calls


async def test_openai_compatible_embeddings_and_a_refused_message(
    stub_url: tuple[str, list[list[str]]],
    start_app: Callable[..., Any],
    tmp_path: Path,
    ids: Callable[[str], str],
) -> None:
    url, calls = stub_url
    settings = embedded_settings(
        tmp_path, embedder="openai", embedding_url=url, embedding_model="stub", embedding_dim=DIM
    )
    async with start_app(settings) as running:
        app: Running = running
        user, session = ids("user"), ids("session")
        body = await post_messages(
            app,
            session,
            user,
            [
                turn("the red bicycle is in the garage", id="a"),
                turn("REFUSE this one please", id="b"),
                # Far from the first in the stub's 8 dimensions ("blue kayak on the lake"
                # is 0.55 from it): a newer turn that close and as relevant passes for a
                # restatement of it (`NewerFactsFirst`).
                turn("my kayak floats", id="c"),
            ],
        )
        # Indexed all the same: the refused message stays in the log, unindexed.
        assert body["indexed_seq"] == 3
        found = await recall(app, user, "red bicycle garage", top_k=3)
        assert [r["sources"][0]["message_id"] for r in found][:1] == ["a"]
        assert "b" not in {r["sources"][0]["message_id"] for r in found}
        listed = await app.client.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
        assert [m["id"] for m in listed.json()["items"]] == ["a", "b", "c"]
        assert any(len(c) > 1 for c in calls)  # batched first, then one by one

        refused = await app.client.post(
            "/v1/memories",
            json={"user_id": user, "content": "REFUSE me", "memory_type": "semantic"},
        )
        assert refused.status_code == 422
        assert refused.json()["code"] == "embedding_rejected"


async def test_an_asymmetric_model_gets_queries_and_stored_texts_apart(
    start_app: Callable[..., Any], tmp_path: Path, ids: Callable[[str], str]
) -> None:
    """e5-style models: the query model name and prefix on the recall's query only, the
    document prefix on every stored text (turns and a memory written by hand)."""
    sent: list[tuple[str, str]] = []  # (model, text)
    stub = FastAPI()

    @stub.post("/v1/embeddings")
    async def embeddings(body: dict[str, Any]) -> Any:
        texts: list[str] = body["input"]
        sent.extend((body["model"], t) for t in texts)
        bare = [t.removeprefix("query: ").removeprefix("passage: ") for t in texts]
        return {"data": [{"index": i, "embedding": _vector(t)} for i, t in enumerate(bare)]}

    async with serve(stub) as url:
        settings = embedded_settings(
            tmp_path,
            embedder="openai",
            embedding_url=url,
            embedding_model="e5-passage",
            embedding_dim=DIM,
            embedding_query_model="e5-query",
            embedding_query_prefix="query: ",
            embedding_document_prefix="passage: ",
        )
        async with start_app(settings) as running:
            app: Running = running
            user, session = ids("user"), ids("session")
            await post_messages(
                app,
                session,
                user,
                [turn("the red bicycle is in the garage", id="a"), turn("blue kayak", id="b")],
            )
            written = await app.client.post(
                "/v1/memories",
                json={"user_id": user, "content": "green tent", "memory_type": "semantic"},
            )
            assert written.status_code == 201
            stored = list(sent)
            sent.clear()
            found = await recall(app, user, "red bicycle garage", top_k=3)

    assert [r["sources"][0]["message_id"] for r in found if r["sources"]][:1] == ["a"]
    assert sent == [("e5-query", "query: red bicycle garage")]
    assert stored
    assert all(m == "e5-passage" and t.startswith("passage: ") for m, t in stored)
    assert {"passage: green tent"} <= {t for _, t in stored}
    assert any("red bicycle" in t for _, t in stored)
