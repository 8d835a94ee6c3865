"""Mem0's side of bench/mem0_compare.py, run by the Python of Mem0's own benchmark venv
(never the project's): open-source `mem0ai` with `infer=False` (no LLM: each turn stored as
it is, as Strata stores turns), FAISS as its vector store, and the embedder served over an
OpenAI-compatible endpoint (bench/embed_server.py, Strata's own model).

Usage: <mem0 venv>/bin/python bench/mem0_side.py JOB.json OUT.json
JOB: {embed_url, dims, workdir, top_k, turns: [{user_id, dia_id, role, name, content}],
      questions: [{user_id, question}]}
OUT: {version, faiss, add_ms: [...], search_ms: [...], embed_ms: [...], ranked: [[dia_id]]}
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import version
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")  # no events sent anywhere
# Mem0 builds its default LLM client at start even with infer=False; it is never called.
os.environ.setdefault("OPENAI_API_KEY", "unused-infer-false")

from mem0 import Memory


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

    search_ms: list[float] = []
    ranked: list[list[str]] = []
    for q in job["questions"]:
        start = time.perf_counter()
        found = memory.search(
            q["question"], top_k=job["top_k"], filters={"user_id": q["user_id"]}, threshold=0.0
        )
        search_ms.append((time.perf_counter() - start) * 1000)
        ranked.append([str(r.get("metadata", {}).get("dia_id", "")) for r in found["results"]])
    # What the embedding call alone costs Mem0 (an HTTP round trip to the local endpoint),
    # to set beside its search latency.
    embed_ms: list[float] = []
    for q in job["questions"]:
        start = time.perf_counter()
        memory.embedding_model.embed(q["question"], "search")
        embed_ms.append((time.perf_counter() - start) * 1000)
    out = {
        "embed_ms": embed_ms,
        "version": version("mem0ai"),
        "faiss": version("faiss-cpu"),
        "add_ms": add_ms,
        "search_ms": search_ms,
        "ranked": ranked,
    }
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
