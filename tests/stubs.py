"""A small local HTTP server for outbound-provider stubs (embeddings, LLM): a real socket,
so the provider code runs its real client, retries and time-outs against it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: a stub runs in pytest's own thread, where
    uvicorn's would take SIGINT/SIGTERM from pytest (a CI runner's stop would only end the
    stub, and the run would go on with no traceback)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    """Serve `app` on a free loopback port; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # held from here on: no other process can take the port
    port = sock.getsockname()[1]
    # A request a test left hanging (a held call whose client was killed) must not hold
    # the shutdown forever: uvicorn waits for open requests unless given a limit.
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "the stub server did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        done, _ = await asyncio.wait({task}, timeout=30)
        if not done:
            server.force_exit = True
            await asyncio.wait({task}, timeout=10)
        sock.close()


ChatResponder = Callable[[list[dict[str, str]]], Any]
"""Answers one chat completion: the request's messages in, the JSON answer out (any value,
serialised as the completion's content), or an int for an HTTP error status."""


def chat_app(responder: ChatResponder, calls: list[list[dict[str, str]]]) -> FastAPI:
    """An OpenAI-compatible `/v1/chat/completions` whose answers `responder` computes from
    the prompt (a scripted model); every request's messages are appended to `calls`."""
    app = FastAPI()

    async def chat(request: Request) -> Any:
        body = await request.json()
        messages: list[dict[str, str]] = body["messages"]
        calls.append(messages)
        answer = responder(messages)
        if isinstance(answer, int):
            return JSONResponse({"error": "stub"}, status_code=answer)
        return {
            "choices": [
                {"message": {"role": "assistant", "content": orjson.dumps(answer).decode()}}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20},
        }

    app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
    return app
