"""The service levels at scale, one row each, in one run (`make bench-scale`).

- recall, 100k memories, 8 clients: `scale.py`'s cell on a copy of the seeded,
  graph-built 100k directory;
- the native ceiling, same run: `native_floor.py` in-process on the same directory (the
  query embedding and Edge's own calls alone, on `--cores` cores), and the share of it
  recall reaches;
- context, 10k memories, 8 clients: `scale.py`'s context cell (budget 4,000);
- api RSS at 100k: steady after the recall cell, with each mapping's share
  (`/proc/PID/smaps`, grouped by what holds it); peak sampled every 0.2 s while a fresh
  server imports `--import-messages` messages in batches of 200 and indexes them;
- ingest, one message a request, while promoting: `ab_ingest.py`'s run (a fresh server,
  `--ingest-requests` messages, `wait=false`, the in-process worker promoting as they come);
- Mem0 side by side (with `--mem0-python`): `mem0_compare.py`, LoCoMo conversations 1-3,
  `search(top_k=--mem0-top-k, threshold=0)` beside Strata's recall of as many.

Latencies are client-side, p50 / p99, with the client's CPU and the server's beside them
(share of one core over the cell). The targets are docs/architecture.md §9's for two
cores. Printed as one markdown table with the machine and the commit.

    python bench/scale_table.py [--seconds 15] [--import-messages 100000] [--out FILE]
        [--mem0-python PATH --locomo PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import native_floor
import scale
from ab_ingest import one_run
from benchlib import machine_facts, print_machine
from latency import make_messages, message_text, query_text
from loadgen import run

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def smaps(pid: int) -> dict[str, float]:
    """The process's resident MiB by what holds it: each index file kind, the heap, the
    anonymous mappings, the shared libraries."""
    parts: collections.defaultdict[str, float] = collections.defaultdict(float)
    name = "anonymous"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            fields = line.split()
            path = fields[5] if len(fields) > 5 else ""
            if "/qdrant/" in path:
                # segments/<uuid>/vector_storage-dense/matrix.dat -> index: vector_storage-dense
                rel = path.split("/qdrant/", 1)[1].split("/")
                kind = rel[-2] if len(rel) >= 2 else rel[-1]
                kind = re.sub(r"^[0-9a-z]{24}-", "", kind)  # payload index dirs
                name = f"index: {kind}/{rel[-1].split('_')[0].split('-')[0]}"
            elif path == "[heap]":
                name = "heap (glibc)"
            elif ".so" in path:
                name = "shared libraries"
            elif path.startswith("/") and not path.startswith("/dev"):
                name = f"file: {Path(path).name}"
            else:
                name = "anonymous"
        elif line.startswith("Rss:"):
            parts[name] += int(line.split()[1]) / 1024
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def memory_budget(parts: dict[str, float]) -> dict[str, float]:
    """`smaps` grouped by concern: the process (code, model tables, Python), the index's
    vectors, graph, payloads, write-ahead log and the rest."""
    out: collections.defaultdict[str, float] = collections.defaultdict(float)
    for name, mib in parts.items():
        if name.startswith("index: vector_storage-dense"):
            out["index: dense vectors"] += mib
        elif name.startswith("index: vector_storage-turn"):
            out["index: turn vectors"] += mib
        elif "quantized" in name:
            out["index: quantized vectors"] += mib
        elif name.startswith("index: vector_index"):
            out["index: HNSW graph"] += mib
        elif name.startswith(("index: payload_storage", "index: store")):
            out["index: payloads"] += mib
        elif name.startswith("index: wal"):
            out["index: write-ahead log"] += mib
        elif name.startswith("index: vectors"):
            out["index: appendable segment"] += mib
        elif name.startswith("index:"):
            out["index: payload indexes, ids, other"] += mib
        else:
            out[f"process: {name}"] += mib
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def recall_at_100k(args: argparse.Namespace) -> dict[str, Any]:
    template = scale.built(100_000, RESULTS)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="strata-table.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(template, data)
        server = scale.Server(args.repo, data, RESULTS / "table-100k.log")
        try:
            pid = server.proc.pid
            out["settle_seconds"] = scale.settle(pid, args.settle_seconds)
            rng = random.Random(11)
            bodies = [
                {"user_id": scale.USER, "query": query_text(rng), "top_k": 10} for _ in range(4000)
            ]
            asyncio.run(run("127.0.0.1", server.port, "/v1/recall", bodies[-50:], clients=2,
                            requests=50))  # fmt: skip
            c0 = scale.cpu_seconds(pid)
            res = asyncio.run(run("127.0.0.1", server.port, "/v1/recall", bodies,
                                  clients=8, seconds=args.seconds))  # fmt: skip
            out["recall"] = scale.cell(res, scale.cpu_seconds(pid) - c0)
            out["rss_mib"] = scale.rss_mib(pid)
            out["smaps"] = smaps(pid)
        finally:
            server.stop()
    floor_args = argparse.Namespace(
        data_dir=template, user=scale.USER, queries=400, clients=8, cores=args.cores
    )
    cwd = os.getcwd()
    os.chdir(args.repo)  # native_floor imports the checkout's `app`
    try:
        out["floor"] = asyncio.run(native_floor.measure(floor_args))
    finally:
        os.chdir(cwd)
    return out


def context_at_10k(args: argparse.Namespace) -> dict[str, Any]:
    template = scale.built(10_000, RESULTS)
    with tempfile.TemporaryDirectory(prefix="strata-table.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(template, data)
        server = scale.Server(args.repo, data, RESULTS / "table-10k.log")
        try:
            pid = server.proc.pid
            rng = random.Random(5)
            session = f"{scale.USER}-live"
            turns = [
                {"role": "user" if i % 2 == 0 else "assistant",
                 "content": message_text(rng)} for i in range(20)
            ]  # fmt: skip
            body = {"user_id": scale.USER, "messages": turns, "wait": True}
            scale.post(server.port, f"/v1/sessions/{session}/messages", body, timeout=120)
            scale.settle(pid, args.settle_seconds)
            rng = random.Random(11)
            path = f"/v1/sessions/{session}/context"
            bodies = [
                {"user_id": scale.USER, "token_budget": 4000, "query": query_text(rng)}
                for _ in range(2000)
            ]
            warm = [*bodies[-49:], {"user_id": scale.USER, "token_budget": 4000,
                                    "query": "她住在哪里？"}]  # fmt: skip
            asyncio.run(run("127.0.0.1", server.port, path, warm, clients=2,
                            requests=len(warm)))  # fmt: skip
            c0 = scale.cpu_seconds(pid)
            res = asyncio.run(run("127.0.0.1", server.port, path, bodies, clients=8,
                                  seconds=args.seconds))  # fmt: skip
            return {"context": scale.cell(res, scale.cpu_seconds(pid) - c0)}
        finally:
            server.stop()


def ingest_while_promoting(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="strata-table.") as tmp:
        server = scale.Server(args.repo, Path(tmp) / "data", RESULTS / "table-ingest.log")
        try:
            pid = server.proc.pid
            scale.settle(pid, 60)
            c0, t0 = scale.cpu_seconds(pid), time.monotonic()
            found = asyncio.run(one_run(server.port, args.ingest_requests, 1))
            found["server_cpu"] = (scale.cpu_seconds(pid) - c0) / (time.monotonic() - t0)
            return found
        finally:
            server.stop()


def import_peak(args: argparse.Namespace) -> dict[str, Any]:
    """A fresh server imports `--import-messages` in batches of 200 (`wait=false`) and
    indexes them; its RSS sampled every 0.2 s from the first batch until idle again."""
    n = args.import_messages
    with tempfile.TemporaryDirectory(prefix="strata-table.") as tmp:
        server = scale.Server(args.repo, Path(tmp) / "data", RESULTS / "table-import.log")
        pid = server.proc.pid
        samples: list[float] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                samples.append(scale.rss_mib(pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        try:
            scale.settle(pid, 60)
            start_rss = scale.rss_mib(pid)
            sampler.start()
            rng = random.Random(7)
            session, user = "import-table", "import-user"
            t0 = time.monotonic()
            for i in range(0, n, 200):
                batch = make_messages(rng, f"b{i}", min(200, n - i))
                scale.post(server.port, f"/v1/sessions/{session}/messages",
                           {"user_id": user, "messages": batch}, timeout=120)  # fmt: skip
            accepted = time.monotonic() - t0
            while True:
                info = scale.get(server.port, f"/v1/sessions/{session}?user_id={user}")
                if info["indexed_seq"] >= info["last_seq"]:
                    break
                time.sleep(1)
            indexed = time.monotonic() - t0
            scale.settle(pid, args.settle_seconds)
            done.set()
            sampler.join()
            return {
                "messages": n,
                "start_rss_mib": start_rss,
                "peak_rss_mib": max(samples),
                "end_rss_mib": scale.rss_mib(pid),
                "accepted_seconds": accepted,
                "indexed_seconds": indexed,
                "rss_every_second": samples[::5],  # where the peak falls (a graph's swap?)
            }
        finally:
            done.set()
            server.stop()


def mem0_rows(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    if args.mem0_python is None:
        return None
    out = RESULTS / "table-mem0.json"
    cmd = [sys.executable, str(HERE / "mem0_compare.py"), "--data", str(args.locomo),
           "--conversations", "3", "--top-k", str(args.mem0_top_k),
           "--mem0-python", str(args.mem0_python), "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True)
    rows: list[dict[str, Any]] = json.loads(out.read_text())["rows"]
    return rows


def ms(c: dict[str, Any]) -> str:
    return (
        f"p50 {c['p50']:.1f} ms, p99 {c['p99']:.1f} ms ({c['p99'] / c['p50']:.1f}×), "
        f"{c['rate']:.0f}/s; client CPU {100 * c['client_cpu']:.0f}%, "
        f"server {100 * c['server_cpu']:.0f}%"
    )


def mem0_line(rows: list[dict[str, Any]]) -> str:
    """Mem0's search in-process against Strata's recall over raw HTTP/1.1 (p50 / p95)."""
    mem0 = next(x for x in rows if x["system"].startswith("Mem0"))
    strata = next(x for x in rows if x["system"].startswith("Strata"))
    ours = strata.get("search_lean_client_ms") or strata["search_ms"]
    theirs = mem0["search_ms"]
    return (
        f"| Mem0 side by side (LoCoMo 1-3) | Mem0 p50 {theirs['p50']:.1f} / p95 "
        f"{theirs['p95']:.1f} ms, R@10 {mem0['R@10']:.3f}; Strata over HTTP p50 "
        f"{ours['p50']:.1f} / p95 {ours['p95']:.1f} ms "
        f"(**{ours['p95'] / theirs['p95']:.1f}×** at p95), R@10 {strata['R@10']:.3f} "
        "| ≤ 1.5×, R@10 kept |"
    )


def table(r: dict[str, Any]) -> str:
    lines = ["| measure (same run) | now | target |", "|---|---|---|"]
    if "recall" in r:
        rec, floor = r["recall"]["recall"], r["recall"]["floor"]
        share = rec["rate"] / floor["ceiling"]
        lines.append(f"| recall, 100k, 8 clients | {ms(rec)} | p99 ≤ 4× p50 |")
        lines.append(
            f"| native ceiling (same run, {floor['cores']} cores) | {floor['ceiling']:.0f}/s "
            f"({floor['floor_ms']:.2f} ms of native CPU a recall); recall reaches "
            f"**{100 * share:.0f}%** | ≥ 60% |"
        )
    if "context" in r:
        lines.append(f"| context, 10k, 8 clients | {ms(r['context']['context'])} | p99 ≤ 4× p50 |")
    if "recall" in r:
        lines.append(
            f"| api RSS, 100k memories, steady (after the recall cell) | "
            f"{r['recall']['rss_mib']:.0f} MiB | ≤ 600 MB |"
        )
    if "import" in r:
        imp = r["import"]
        lines.append(
            f"| api RSS during an import of {imp['messages']:,} messages | peak "
            f"{imp['peak_rss_mib']:.0f} MiB (start {imp['start_rss_mib']:.0f}, end "
            f"{imp['end_rss_mib']:.0f}; indexed in {imp['indexed_seconds']:.0f} s) | ≤ 800 MB |"
        )
    if "ingest" in r:
        lat = r["ingest"]["latency_ms"]
        lines.append(
            f"| ingest, one message a request, while promoting | p50 {lat['p50']:.1f} ms, "
            f"p99 {lat['p99']:.1f} ms; server CPU {100 * r['ingest']['server_cpu']:.0f}% "
            "| p99 ≤ 20 ms |"
        )
    if r.get("mem0"):
        lines.append(mem0_line(r["mem0"]))
    if "recall" in r:
        lines.append("")
        lines.append("Steady RSS at 100k by what holds it (MiB):")
        lines.append("")
        lines.extend(f"- {k}: {v:.0f}" for k, v in memory_budget(r["recall"]["smaps"]).items())
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--table":  # re-print a saved report
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repo", type=Path, default=HERE.parent, help="the server's checkout")
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--settle-seconds", type=float, default=300)
    p.add_argument("--ingest-requests", type=int, default=1000)
    p.add_argument("--import-messages", type=int, default=100_000, help="0: no import row")
    p.add_argument("--rows", default="recall,context,ingest,import,mem0")
    p.add_argument("--mem0-python", type=Path, help="Mem0's venv python (make bench-mem0)")
    p.add_argument("--mem0-top-k", type=int, default=50)
    p.add_argument("--locomo", type=Path, help="your copy of LoCoMo's locomo10.json")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.repo = args.repo.resolve()
    rows = set(args.rows.split(","))
    RESULTS.mkdir(exist_ok=True)
    facts = machine_facts()
    print_machine(facts)
    report: dict[str, Any] = {"machine": facts, "repo": str(args.repo)}
    steps = [
        ("recall", recall_at_100k),
        ("context", context_at_10k),
        ("ingest", ingest_while_promoting),
        ("import", import_peak if args.import_messages else None),
        ("mem0", mem0_rows),
    ]
    for name, step in steps:
        if name in rows and step is not None:
            print(f"  {name} ...", flush=True)
            t = time.monotonic()
            report[name] = step(args)
            print(f"  {name} done in {time.monotonic() - t:.0f} s", flush=True)
    print(table(report))
    out = args.out or RESULTS / f"table-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
