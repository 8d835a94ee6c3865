"""Strata beside Mem0 (open source, `mem0ai` from PyPI) in one run, on the same LoCoMo
conversations and the same embedder: add latency, search p50/p95, turn-level R@10.

- Mem0 runs in its own benchmark venv (never a project dependency; `make bench-mem0` builds
  it), in-process as its users call it, with `infer=False` (each turn stored as it is: no
  LLM, as Strata without one), FAISS (its fastest vector store that installs here), and
  Strata's own model as its embedder: `--mem0-embedder inprocess` (default) loads it inside
  Mem0's process; `http` calls it through bench/embed_server.py's OpenAI-compatible
  `/v1/embeddings`, one round trip per add and per search. bench/mem0_side.py says exactly
  how Mem0 is called.
- Strata runs as its embedded server (SQLite, Qdrant Edge, in-process worker) on a fresh data
  dir and is driven over HTTP by one sequential client, like Mem0's single caller. Each
  search phase gets a freshly started server on the same data, so no phase finds the
  questions' embeddings cached by an earlier one.
- The two sides run one after the other, never at once, so neither takes the other's cores.
  Within a side, the phases alternate: for each round, each `--top-k`, each embedder.

Usage: python bench/mem0_compare.py --data /path/to/locomo10.json [--conversations 3]
       [--top-k 50 10] [--mem0-embedder inprocess http] [--rounds 2] [--py-spy OUT.svg]
The data file is the user's own copy of LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
from benchlib import (
    JSON,
    REPO_ROOT,
    Api,
    fmt,
    machine_facts,
    print_machine,
    summarize,
    wait_indexed,
    wait_ready,
    write_json,
)
from loadgen import encode, read_response
from locomo import Conversation, load_conversations

R_AT = 10  # R@10: the evidence among the first 10 results, whatever `--top-k` asks
DEFAULT_MEM0_PYTHON = REPO_ROOT / ".bench-venvs" / "mem0" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def process(args: list[str], log: Path, env: dict[str, str], ready_url: str) -> Iterator[int]:
    """A server process, up once `ready_url` answers 200; stopped (its group) on exit."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            args, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited at start; see {log}")
            try:
                if httpx.get(ready_url, timeout=2, trust_env=False).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ready_url} not ready after 180 s; see {log}")
            time.sleep(0.3)
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def evidence_recall(ranked: Sequence[Sequence[str]], evidence: Sequence[str]) -> float:
    found = {d for ids in ranked[:R_AT] for d in ids}
    return sum(1 for e in evidence if e in found) / len(evidence)


def clean_env() -> dict[str, str]:
    """The caller's environment without Strata's or a proxy's settings."""
    drop = ("STRATA_", "PROMETHEUS_MULTIPROC_DIR", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


# --------------------------------------------------------------------------- Mem0


def run_mem0(
    conversations: list[Conversation],
    mem0_python: Path,
    work: Path,
    top_ks: Sequence[int],
    embedders: Sequence[str],
    rounds: int,
) -> list[JSON]:
    port = free_port()
    turns: list[JSON] = [
        {
            "user_id": c.user_id,
            "dia_id": m["id"],
            "role": m["role"],
            "name": m["metadata"]["name"],
            "content": m["content"],
        }
        for c in conversations
        for s in c.sessions
        for m in s.messages
    ]
    job = {
        "embed_url": f"http://127.0.0.1:{port}/v1",
        "embedders": list(embedders),
        "dims": 512,
        "workdir": str(work / "mem0"),
        "top_ks": list(top_ks),
        "rounds": rounds,
        "turns": turns,
        "questions": [
            {"user_id": c.user_id, "question": q.question}
            for c in conversations
            for q in c.questions
        ],
    }
    (work / "mem0").mkdir()
    job_path, out_path = work / "mem0-job.json", work / "mem0-out.json"
    job_path.write_text(json.dumps(job))
    server = [sys.executable, "bench/embed_server.py", "--port", str(port)]
    ready = f"http://127.0.0.1:{port}/docs"
    with process(server, work / "embed-server.log", clean_env(), ready):
        start = time.monotonic()
        done = subprocess.run(
            [str(mem0_python), "bench/mem0_side.py", str(job_path), str(out_path)],
            cwd=REPO_ROOT,
            env={**clean_env(), "MEM0_DIR": str(work / "mem0-home")},
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"mem0 side failed:\n{done.stderr[-3000:]}")
    out: JSON = json.loads(out_path.read_text())
    questions = [q for c in conversations for q in c.questions]
    rows: list[JSON] = []
    for embedder in embedders:
        for top_k in top_ks:
            phases = [
                p for p in out["searches"] if p["embedder"] == embedder and p["top_k"] == top_k
            ]
            recalls = [
                evidence_recall([[d] for d in ranked], q.evidence)
                for ranked, q in zip(phases[0]["ranked"], questions, strict=True)
            ]
            rows.append(
                {
                    "system": f"Mem0 {out['version']} (faiss-cpu {out['faiss']}), in-process, "
                    f"infer=False, embedder {embedder}",
                    "embedder": embedder,
                    "top_k": top_k,
                    "memories": len(turns),
                    "add_embedder": out["add_embedder"],
                    "checked_identical": out["checked"],
                    "add_ms": summarize(out["add_ms"]),
                    "add_total_seconds": sum(out["add_ms"]) / 1000,
                    "searchable_after_seconds": sum(out["add_ms"]) / 1000,  # stored on return
                    "search_ms": summarize([x for p in phases for x in p["search_ms"]]),
                    "search_ms_by_round": [summarize(p["search_ms"]) for p in phases],
                    "search_embedding_ms": summarize(out["embed_ms"][embedder]),
                    "R@10": sum(recalls) / len(recalls) if recalls else None,
                    "wall_seconds": seconds,
                }
            )
    return rows


# --------------------------------------------------------------------------- Strata


async def ingest_strata(url: str, conversations: list[Conversation]) -> JSON:
    async with Api(url, None, 120) as api:
        if not await wait_ready(api, 120):
            raise RuntimeError(f"Strata at {url} is not ready")
        add_ms: list[float] = []
        start = time.monotonic()
        for c in conversations:
            for s in c.sessions:
                for m in s.messages:  # one turn per call, as Mem0's add
                    data, ms = await api.ingest(s.session_id, c.user_id, [m], False)
                    if data is None:
                        raise RuntimeError(f"ingest failed: {api.errors.samples[:1]}")
                    add_ms.append(ms)
        added = time.monotonic() - start
        sessions = [(s.session_id, c.user_id) for c in conversations for s in c.sessions]
        caught_up, _ = await wait_indexed(api, sessions, 900)
        searchable = time.monotonic() - start
        if not caught_up:
            raise RuntimeError("Strata did not index everything within 900 s")
    return {
        "memories": len(add_ms),
        "add_ms": summarize(add_ms),
        "add_total_seconds": added,
        "searchable_after_seconds": searchable,
    }


async def search_strata(url: str, conversations: list[Conversation], top_k: int) -> JSON:
    """One search phase: every question once, on a server that has embedded none of them."""
    async with Api(url, None, 120) as api:
        if not await wait_ready(api, 120):
            raise RuntimeError(f"Strata at {url} is not ready")
        search_ms: list[float] = []
        lean_ms: list[float] = []
        took_ms: list[float] = []
        recalls: list[float] = []
        lean = await LeanClient.open(url)
        n = 0
        for c in conversations:
            prefix = f"conv{c.index}-session"
            for q in c.questions:
                body = {
                    "user_id": c.user_id,
                    "query": q.question,
                    "top_k": top_k,
                    "as_of": c.as_of.isoformat(),
                    "reinforce": False,
                }
                # Each question through both clients, the first of the two taking turns: the
                # second finds the query's embedding cached, so each client's figures are
                # its first asks only (half the questions each).
                n += 1
                if n % 2 == 0:
                    lean_ms.append(await lean.recall(body))
                data, ms = await api.recall(body)
                if data is None:
                    raise RuntimeError(f"recall failed: {api.errors.samples[:1]}")
                if n % 2 == 1:
                    search_ms.append(ms)
                    took_ms.append(float(data["took_ms"]))
                    await lean.recall(body)
                ranked = [
                    [x["message_id"] for x in r["sources"] if x["session_id"].startswith(prefix)]
                    for r in data["results"]
                ]
                recalls.append(evidence_recall(ranked, q.evidence))
        lean.close()
    return {
        "search_ms": search_ms,
        "took_ms": took_ms,
        "lean_ms": lean_ms,
        "R@10": sum(recalls) / len(recalls) if recalls else None,
    }


class LeanClient:
    """Searches over one raw HTTP/1.1 keep-alive connection: httpx spends a millisecond or
    two of the same two cores per request, which Mem0 in-process does not pay; both
    figures are reported."""

    def __init__(self, host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.host, self.reader, self.writer = host, reader, writer

    @classmethod
    async def open(cls, url: str) -> LeanClient:
        host, _, port = url.split("://", 1)[1].partition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(f"{host}:{port}", reader, writer)

    async def recall(self, body: JSON) -> float:
        start = time.perf_counter()
        self.writer.write(encode(self.host, "/v1/recall", body))
        status, raw = await read_response(self.reader)
        if status >= 400:
            raise RuntimeError(f"recall failed: {status} {raw[:200]!r}")
        return (time.perf_counter() - start) * 1000

    def close(self) -> None:
        self.writer.close()


@contextlib.contextmanager
def strata_server(work: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    env = {**clean_env(), "STRATA_DATA_DIR": str(work / "strata"), "STRATA_LOG_LEVEL": "WARNING"}
    server = [
        sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app",
        "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with process(server, work / "strata-server.log", env, f"{url}/readyz") as pid:
        yield url, pid


@contextlib.contextmanager
def py_spy(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy sampling the server while the block runs (its flame graph to `out`)."""
    if out is None:
        yield
        return
    spy = subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--rate", "250", "--nonblocking",
         "--format", "raw" if out.suffix == ".txt" else "flamegraph", "-o", str(out)],
    )  # fmt: skip
    time.sleep(1.0)  # attached before the first request
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def run_strata(
    conversations: list[Conversation],
    work: Path,
    top_ks: Sequence[int],
    rounds: int,
    profile: Path | None,
) -> list[JSON]:
    with strata_server(work) as (url, _):
        added = asyncio.run(ingest_strata(url, conversations))
    phases: dict[int, list[JSON]] = {k: [] for k in top_ks}
    for n in range(rounds):
        for top_k in top_ks:
            with strata_server(work) as (url, pid):
                spied = profile if n == 0 and top_k == top_ks[0] else None
                with py_spy(pid, spied):
                    phases[top_k].append(asyncio.run(search_strata(url, conversations, top_k)))
    return [
        {
            "system": "Strata, embedded server over HTTP (one sequential client)",
            "top_k": top_k,
            **added,
            "search_ms": summarize([x for p in phases[top_k] for x in p["search_ms"]]),
            "search_server_took_ms": summarize([x for p in phases[top_k] for x in p["took_ms"]]),
            "search_lean_client_ms": summarize([x for p in phases[top_k] for x in p["lean_ms"]]),
            "search_ms_by_round": [summarize(p["search_ms"]) for p in phases[top_k]],
            "search_lean_client_ms_by_round": [summarize(p["lean_ms"]) for p in phases[top_k]],
            "R@10": phases[top_k][0]["R@10"],
        }
        for top_k in top_ks
    ]


# --------------------------------------------------------------------------- report


def print_table(rows: Sequence[JSON]) -> None:
    print(
        f"{'system':78s} {'top_k':>5s} {'memories':>8s}  {'add p50':>7s} {'add p95':>7s}  "
        f"{'searchable':>10s}  {'search p50':>10s} {'p95':>6s}  {'R@10':>5s}"
    )
    for r in rows:
        print(
            f"{r['system']:78s} {r['top_k']:5d} {r['memories']:8d}  {fmt(r['add_ms']['p50']):>7s} "
            f"{fmt(r['add_ms']['p95']):>7s}  {r['searchable_after_seconds']:9.1f}s  "
            f"{fmt(r['search_ms']['p50']):>10s} {fmt(r['search_ms']['p95']):>6s}  "
            f"{fmt(r['R@10'], 3):>5s}"
        )
    print("(milliseconds; searchable: seconds from the first add until every turn is searchable)")
    for r in rows:
        label = f"top_k {r['top_k']}:"
        if "search_embedding_ms" in r:
            e = r["search_embedding_ms"]
            print(
                f"  {label} Mem0's query embedding alone ({r['embedder']}): p50 {fmt(e['p50'])} ms"
            )
        if "search_server_took_ms" in r:
            t = r["search_server_took_ms"]
            print(
                f"  {label} Strata's took_ms (server side, no HTTP; httpx's half): "
                f"p50 {fmt(t['p50'])}, p95 {fmt(t['p95'])}"
            )
        if "search_lean_client_ms" in r:
            t = r["search_lean_client_ms"]
            print(
                f"  {label} Strata's search over raw HTTP/1.1 (no httpx; the other half): "
                f"p50 {fmt(t['p50'])}, p95 {fmt(t['p95'])}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="path to locomo10.json")
    parser.add_argument("--conversations", type=int, default=3, help="the first N (default 3)")
    parser.add_argument("--mem0-python", type=Path, default=DEFAULT_MEM0_PYTHON)
    parser.add_argument("--skip-mem0", action="store_true")
    parser.add_argument(
        "--top-k",
        type=int,
        nargs="+",
        default=[50],
        help="results each search asks for, one phase each (R@10 reads the first 10)",
    )
    parser.add_argument(
        "--mem0-embedder",
        nargs="+",
        choices=["inprocess", "http"],
        default=["inprocess"],
        help="how Mem0 calls the model: in its own process, or over HTTP to embed_server.py; "
        "Mem0's adds use the first",
    )
    parser.add_argument("--rounds", type=int, default=1, help="search phases of each kind")
    parser.add_argument(
        "--py-spy", type=Path, help="profile Strata's first search phase with py-spy to here"
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    facts = machine_facts()
    print_machine(facts)
    conversations = load_conversations(Path(args.data), args.conversations)
    turns = sum(len(s.messages) for c in conversations for s in c.sessions)
    questions = sum(len(c.questions) for c in conversations)
    print(f"LoCoMo: {len(conversations)} conversations, {turns} turns, {questions} questions")
    rows: list[JSON] = []
    with tempfile.TemporaryDirectory(prefix="strata-mem0-") as tmp:
        work = Path(tmp)
        if not args.skip_mem0:
            if not args.mem0_python.exists():
                print(f"no Mem0 venv at {args.mem0_python}: run `make bench-mem0`", file=sys.stderr)
                return 2
            rows += run_mem0(
                conversations,
                args.mem0_python,
                work,
                args.top_k,
                args.mem0_embedder,
                args.rounds,
            )
        rows += run_strata(conversations, work, args.top_k, args.rounds, args.py_spy)
    print_table(rows)
    if args.out:
        write_json(
            args.out,
            {
                "machine": facts,
                "conversations": args.conversations,
                "top_k": args.top_k,
                "mem0_embedder": args.mem0_embedder,
                "rounds": args.rounds,
                "rows": rows,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
