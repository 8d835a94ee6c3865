"""A small OpenAI-compatible `/v1/embeddings` endpoint serving Strata's own embedder (the
bundled multilingual USE, 512-d, `app.providers.embeddings.LocalUSE`), so that a peer under
comparison embeds with exactly the model Strata uses (bench/mem0_compare.py).

Usage: python bench/embed_server.py --port 8765
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.providers.embeddings import LocalUSE


def create_app() -> FastAPI:
    model = LocalUSE(bulk_threads=1)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        model.load()
        yield
        await model.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict[str, Any]:
        body = await request.json()
        texts = body["input"]
        texts = [texts] if isinstance(texts, str) else list(texts)
        vectors = await model.embed(texts)  # the query path: one call, no bulk threads
        return {
            "object": "list",
            "model": body.get("model", model.model_id),
            "data": [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
