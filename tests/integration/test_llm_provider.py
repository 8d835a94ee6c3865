"""The OpenAI-compatible LLM provider against a local stub server: good answers, 429 with
`Retry-After`, 5xx, time-outs, refusals and garbage JSON."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.providers.llm import (
    LLMInvalidOutput,
    LLMUnavailable,
    OpenAICompatibleLLM,
    retry_after_seconds,
)
from tests.stubs import serve


class Answer(BaseModel):
    rewritten: str


@dataclass
class Stub:
    """What the stub answers, in order, one script entry per call (the last one repeats)."""

    url: str
    script: list[Any] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at teardown: ends every stall, so the stub shuts down without waiting them out."""


def _completion(content: str) -> dict[str, Any]:
    return {
        "id": "stub",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }


def _stub_app(stub: Stub) -> FastAPI:
    app = FastAPI()

    async def chat(request: Request) -> Any:
        stub.calls.append(await request.json())
        stub.paths.append(request.url.path)
        step = stub.script[min(len(stub.calls) - 1, len(stub.script) - 1)]
        if isinstance(step, tuple):  # (status, headers)
            status, headers = step
            return JSONResponse({"error": {"message": "stub"}}, status_code=status, headers=headers)
        if isinstance(step, float):  # stall past the client's time-out, at most `step` s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stub.release.wait(), timeout=step)
            return _completion('{"rewritten": "late"}')
        return _completion(step)

    app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
    return app


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    state = Stub(url="")
    async with serve(_stub_app(state)) as url:
        state.url = url
        try:
            yield state
        finally:
            state.release.set()


def _llm(url: str, *, timeout: float = 5.0, attempts: int = 3) -> OpenAICompatibleLLM:
    client = httpx.AsyncClient(base_url=url, timeout=timeout)
    return OpenAICompatibleLLM(
        client, model="stub-model", max_attempts=attempts, backoff_initial=0.01, backoff_max=0.5
    )


MESSAGES = [{"role": "user", "content": "what about her?"}]


async def test_a_good_answer_is_parsed_and_its_usage_counted(stub: Stub) -> None:
    stub.script = ['{"rewritten": "what about Ana?"}']
    llm = _llm(stub.url)
    try:
        result = await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert result.value.rewritten == "what about Ana?"
    assert result.usage.as_dict() == {
        "prompt_tokens": 11,
        "completion_tokens": 5,
        "total_tokens": 16,
        "calls": 1,
    }
    [call] = stub.calls
    assert call["model"] == "stub-model"
    assert call["response_format"] == {"type": "json_object"}
    assert call["messages"] == MESSAGES


async def test_a_base_url_ending_in_v1_is_not_doubled(stub: Stub) -> None:
    stub.script = ['{"rewritten": "x"}']
    llm = _llm(stub.url + "/v1")
    try:
        await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert stub.paths == ["/v1/chat/completions"]


async def test_429_is_retried_after_the_servers_retry_after(stub: Stub) -> None:
    stub.script = [(429, {"Retry-After": "0.3"}), '{"rewritten": "ok"}']
    llm = _llm(stub.url)
    started = time.monotonic()
    try:
        result = await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert result.value.rewritten == "ok"
    assert len(stub.calls) == 2
    assert time.monotonic() - started >= 0.3  # it waited what the server asked


async def test_5xx_is_retried_then_given_up_within_the_attempts(stub: Stub) -> None:
    stub.script = [(503, {})]
    llm = _llm(stub.url, attempts=3)
    try:
        with pytest.raises(LLMUnavailable, match="503"):
            await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert len(stub.calls) == 3


async def test_a_refusal_is_not_retried(stub: Stub) -> None:
    stub.script = [(401, {})]
    llm = _llm(stub.url)
    try:
        with pytest.raises(LLMUnavailable, match="401"):
            await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert len(stub.calls) == 1


async def test_a_time_out_is_retried_then_reported(stub: Stub) -> None:
    # A whole second per attempt: the stub shares the test's event loop, and on a loaded
    # CI machine 0.2 s once ran out before the second request was even read (1 call seen).
    stub.script = [30.0]
    llm = _llm(stub.url, timeout=1.0, attempts=2)
    try:
        with pytest.raises(LLMUnavailable, match="timed out"):
            await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert len(stub.calls) == 2


@pytest.mark.parametrize(
    "content",
    ["not json at all", '{"rewritten": ', '{"other": "field"}', '["rewritten"]'],
)
async def test_garbage_or_off_schema_json_is_invalid_output(stub: Stub, content: str) -> None:
    stub.script = [content]
    llm = _llm(stub.url)
    try:
        with pytest.raises(LLMInvalidOutput):
            await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert len(stub.calls) == 1  # a model's bad answer is the caller's to fall back from


async def test_json_in_a_code_fence_is_accepted(stub: Stub) -> None:
    stub.script = ['```json\n{"rewritten": "fenced"}\n```']
    llm = _llm(stub.url)
    try:
        result = await llm.complete_json(MESSAGES, Answer, purpose="test")
    finally:
        await llm.close()
    assert result.value.rewritten == "fenced"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("Mon, 30 Nov 2026 12:00:05 GMT", now=now) == 5.0
    assert retry_after_seconds("Mon, 30 Nov 2026 11:00:00 GMT", now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None
