"""Mem0's side of bench/mem0_compare.py, run by the Python of Mem0's own benchmark venv
(never the project's): open-source `mem0ai` with `infer=False` (no LLM: each turn stored as
it is, as Strata stores turns) and FAISS as its vector store, embedding with Strata's own
model (the bundled USE, `app.providers.embeddings.LocalUSE`).

How Mem0 is called: `Memory.from_config` with the `openai` embedder pointed at
bench/embed_server.py, then for each turn `memory.add([{role, content, name}], user_id=...,
infer=False, metadata={"dia_id": ...})`, and for each question `memory.search(question,
top_k=TOP_K, filters={"user_id": ...}, threshold=0.0)`.

The embedder (`embedder` in the job):
- `inprocess` (default): `memory.embedding_model.embed` / `embed_batch` are replaced by
  LocalUSE's model loaded in this process (threads=1, the C++ tokenizer, as Strata loads
  it), after the same `text.replace("\n", " ")` as Mem0's OpenAI embedder. This is how a
  Mem0 user with a local model calls it: no round trip per add or search. Before the run,
  a few turns and questions are embedded both ways and must give identical vectors.
- `http`: Mem0's OpenAI embedder as configured: one HTTP call to the endpoint per add and
  per search (~4 ms each on two cores, paid inside Mem0's search time).

Usage: <mem0 venv>/bin/python bench/mem0_side.py JOB.json OUT.json
JOB: {embed_url, embedders: [inprocess|http], dims, workdir, top_ks: [k], rounds,
      turns: [{user_id, dia_id, role, name, content}], questions: [{user_id, question}]}
OUT: {version, faiss, add_embedder, checked, add_ms: [...], embed_ms: {embedder: [...]},
      searches: [{embedder, top_k, round, search_ms: [...], ranked: [[dia_id]]}]}
The adds embed with the first of `embedders`; then, for each round, each of `top_ks`, each
of `embedders`, every question is searched once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

os.environ.setdefault("MEM0_TELEMETRY", "False")  # no events sent anywhere
# Mem0 builds its default LLM client at start even with infer=False; it is never called.
os.environ.setdefault("OPENAI_API_KEY", "unused-infer-false")

from mem0 import Memory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.providers.embeddings import LocalUSE


class InProcessEmbedder:
    """Mem0's `embed` / `embed_batch` on Strata's model in this process."""

    def __init__(self) -> None:
        self.model = LocalUSE(bulk_threads=1)
        self.model.load()

    def embed(
        self, text: str, memory_action: Literal["add", "search", "update"] | None = None
    ) -> list[float]:
        return self.model._encode_ordered([text.replace("\n", " ")])[0]

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return self.model._encode_ordered([t.replace("\n", " ") for t in texts])


def check_identical(http: Any, local: InProcessEmbedder, texts: list[str]) -> int:
    """The in-process vectors against the endpoint's, text by text: they must be equal."""
    for text in texts:
        if http.embed(text, "search") != local.embed(text, "search"):
            raise SystemExit(f"in-process and HTTP embeddings differ for {text[:60]!r}")
    return len(texts)


def main() -> int:
    with open(sys.argv[1]) as f:
        job: dict[str, Any] = json.load(f)
    workdir = job["workdir"]
    config = {
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "use-m3",
                "openai_base_url": job["embed_url"],
                "api_key": "local",
            },
        },
        "vector_store": {
            "provider": "faiss",
            "config": {
                "collection_name": "locomo",
                "path": os.path.join(workdir, "faiss"),
                "distance_strategy": "cosine",
                "embedding_model_dims": job["dims"],
            },
        },
        "history_db_path": os.path.join(workdir, "history.db"),
    }
    memory = Memory.from_config(config)
    model = memory.embedding_model
    ways = {"http": (model.embed, model.embed_batch)}
    checked = 0
    if "inprocess" in job["embedders"]:
        local = InProcessEmbedder()
        sample = [t["content"] for t in job["turns"][:5]] + [
            q["question"] for q in job["questions"][:5]
        ]
        checked = check_identical(model, local, sample)
        ways["inprocess"] = (local.embed, local.embed_batch)

    def use(embedder: str) -> None:
        model.embed, model.embed_batch = ways[embedder]

    use(job["embedders"][0])
    add_ms: list[float] = []
    for turn in job["turns"]:
        message = {"role": turn["role"], "content": turn["content"], "name": turn["name"]}
        start = time.perf_counter()
        memory.add(
            [message],
            user_id=turn["user_id"],
            infer=False,
            metadata={"dia_id": turn["dia_id"]},
        )
        add_ms.append((time.perf_counter() - start) * 1000)

    searches: list[dict[str, Any]] = []
    for n in range(job["rounds"]):
        for top_k in job["top_ks"]:
            for embedder in job["embedders"]:
                use(embedder)
                search_ms, ranked = search_all(memory, job["questions"], top_k)
                searches.append(
                    {
                        "embedder": embedder,
                        "top_k": top_k,
                        "round": n,
                        "search_ms": search_ms,
                        "ranked": ranked,
                    }
                )
    # What the embedding call alone costs Mem0 (in-process, or an HTTP round trip to the
    # local endpoint), to set beside its search latency.
    embed_ms: dict[str, list[float]] = {}
    for embedder in job["embedders"]:
        use(embedder)
        embed_ms[embedder] = []
        for q in job["questions"]:
            start = time.perf_counter()
            model.embed(q["question"], "search")
            embed_ms[embedder].append((time.perf_counter() - start) * 1000)
    out = {
        "embed_ms": embed_ms,
        "version": version("mem0ai"),
        "add_embedder": job["embedders"][0],
        "checked": checked,
        "faiss": version("faiss-cpu"),
        "add_ms": add_ms,
        "searches": searches,
    }
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
    return 0


def search_all(
    memory: Memory, questions: list[dict[str, str]], top_k: int
) -> tuple[list[float], list[list[str]]]:
    search_ms: list[float] = []
    ranked: list[list[str]] = []
    for q in questions:
        start = time.perf_counter()
        found = memory.search(
            q["question"], top_k=top_k, filters={"user_id": q["user_id"]}, threshold=0.0
        )
        search_ms.append((time.perf_counter() - start) * 1000)
        ranked.append([str(r.get("metadata", {}).get("dia_id", "")) for r in found["results"]])
    return search_ms, ranked


if __name__ == "__main__":
    sys.exit(main())
