"""Recall and context latency as one user's history grows: the service levels table of
docs/architecture.md §9 at 1k / 10k / 100k memories and 1 / 8 / 16 clients.

    python bench/scale.py [--quick] [--repo PATH] [--label after] [--out FILE]

For each size: a fresh data directory seeded by `seed.py` (SQL rows and index points, as
promotion writes them), an embedded server started from `--repo` (default: this checkout;
pass a checkout of main for the "before" figures) on a free port, a session of 20 turns for
context, a wait until the server is idle (its start-up work done: at 100k the day's
forgetting sweep holds a core for ~40 s, `--settle-seconds`), then `loadgen.py` (raw
asyncio HTTP/1.1, closed loop) for `--seconds` per cell. Beside each figure: the client's
CPU and the server's (share of one core over the cell), and the answers per second.
`--quick` runs 1k and 10k, 1 and 8 clients, 5 s cells (under 5 minutes). `--build-index`
builds the HNSW graph while seeding, with the builder the service runs in the background
(the steady state of a service that has been up a while).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import machine_facts, print_machine
from latency import message_text, query_text
from loadgen import LoadResult, run

HERE = Path(__file__).resolve().parent
USER = "scale-user"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def post(port: int, path: str, body: Any, timeout: float = 60) -> Any:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


class Server:
    def __init__(self, repo: Path, data_dir: Path, log: Path) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
        env |= {"STRATA_DATA_DIR": str(data_dir), "STRATA_LOG_LEVEL": "WARNING"}
        # A checkout without its own .venv runs on this interpreter: `-m` puts the
        # checkout's `app` first on the path.
        py = repo / ".venv" / "bin" / "python"
        py = py if py.exists() else Path(sys.executable)
        self.proc = subprocess.Popen(
            [str(py), "-m", "uvicorn", "--factory", "app.main:create_app", "--host",
             "127.0.0.1", "--port", str(self.port), "--no-access-log"],
            cwd=repo, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.time() + 300
        while True:
            try:
                get(self.port, "/readyz")
                return
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"server did not start; see {log}") from None
                time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def settle(pid: int, limit: float) -> float:
    """Wait until the server uses under 5% of a core over 2 s, at most `limit` seconds:
    the cells measure the service levels, not the work a start leaves (the forgetting sweep
    of the day, a graph build). Returns how long it took; the report keeps it."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        c0 = cpu_seconds(pid)
        time.sleep(2)
        if cpu_seconds(pid) - c0 < 0.1:
            break
    return time.monotonic() - start


def cell(res: LoadResult, server_cpu: float) -> dict[str, Any]:
    return {
        "p50": res.percentile(50),
        "p99": res.percentile(99),
        "rate": res.rate,
        "n": len(res.latencies_ms),
        "errors": res.errors,
        "first_error": res.first_error,
        "client_cpu": res.client_cpu_share,
        "server_cpu": server_cpu / res.seconds if res.seconds else None,
    }


async def measure(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(11)
    recall = [
        {"user_id": USER, "query": query_text(rng), "top_k": 10} for _ in range(2000)
    ]  # distinct queries: the query-vector cache must not make this easy
    context = [{"user_id": USER, "token_budget": 4000, "query": q["query"]} for q in recall[:1000]]
    out: dict[str, Any] = {"recall": {}, "context": {}}
    await run("127.0.0.1", port, "/v1/recall", recall[-50:], clients=2, requests=50)  # warm
    # Context warm too: a Chinese follow-up loads the rewrite's tagger (a ~1 s stall, once
    # per process, measured apart in bench/README.md), which the cells must not include.
    path = f"/v1/sessions/{USER}-live/context"
    warm = [*context[-49:], {"user_id": USER, "token_budget": 4000, "query": "她住在哪里？"}]
    await run("127.0.0.1", port, path, warm, clients=2, requests=len(warm))
    for clients in args.clients:
        c0 = cpu_seconds(pid)
        res = await run("127.0.0.1", port, "/v1/recall", recall, clients=clients,
                        seconds=args.seconds)  # fmt: skip
        out["recall"][str(clients)] = cell(res, cpu_seconds(pid) - c0)
        print(f"    recall  {clients:2d} clients: {fmt_cell(out['recall'][str(clients)])}",
              flush=True)  # fmt: skip
    for clients in args.clients:
        c0 = cpu_seconds(pid)
        res = await run("127.0.0.1", port, path, context, clients=clients, seconds=args.seconds)
        out["context"][str(clients)] = cell(res, cpu_seconds(pid) - c0)
        print(f"    context {clients:2d} clients: {fmt_cell(out['context'][str(clients)])}",
              flush=True)  # fmt: skip
    out["rss_mib"] = rss_mib(pid)
    return out


def fmt_cell(c: dict[str, Any]) -> str:
    if c["p50"] is None:
        return f"no answers ({c['errors']} errors: {c['first_error']})"
    return (
        f"p50 {c['p50']:.1f} ms, p99 {c['p99']:.1f} ms, {c['rate']:.0f} req/s, "
        f"client CPU {100 * c['client_cpu']:.0f}%, server CPU {100 * c['server_cpu']:.0f}%"
        + (f", {c['errors']} errors" if c["errors"] else "")
    )


def seeded(size: int, results: Path) -> Path:
    """A data directory seeded with `size` memories, made once and kept under results/
    (gitignored): every run copies it, so "before" and "after" start from the same data."""
    template = results / f"seeded-{size}"
    if not (template / "done").exists():
        shutil.rmtree(template, ignore_errors=True)
        cmd = [sys.executable, str(HERE / "seed.py"), "--data-dir", str(template),
               "--user", USER, "--memories", str(size)]  # fmt: skip
        subprocess.run(cmd, check=True, env={**os.environ, "STRATA_LOG_LEVEL": "WARNING"})
        (template / "done").write_text("")
    return template


def built(size: int, results: Path) -> Path:
    """The seeded directory with its HNSW graph built (`--build-index`), also made once:
    at 100k the build takes minutes of one core, and it does not change between runs."""
    template = results / f"seeded-{size}-built"
    if not (template / "done").exists():
        shutil.rmtree(template, ignore_errors=True)
        shutil.copytree(seeded(size, results), template)
        (template / "done").unlink()
        build = [sys.executable, str(HERE / "seed.py"), "--data-dir", str(template),
                 "--memories", "0", "--build-index"]  # fmt: skip
        t = time.time()
        subprocess.run(build, check=True, env={**os.environ, "STRATA_LOG_LEVEL": "WARNING"})
        (template / "build_seconds").write_text(f"{time.time() - t:.1f}")
        (template / "done").write_text("")
    return template


def one_size(size: int, args: argparse.Namespace, results: Path) -> dict[str, Any]:
    template = built(size, results) if args.build_index else seeded(size, results)
    with tempfile.TemporaryDirectory(prefix="strata-scale.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(template, data)
        seconds = template / "build_seconds"
        build_seconds = float(seconds.read_text()) if seconds.exists() else 0.0
        server = Server(args.repo, data, results / f"scale-{args.label}-{size}.log")
        try:
            rng = random.Random(5)
            messages = [
                {"role": "user" if i % 2 == 0 else "assistant", "content": message_text(rng)}
                for i in range(20)
            ]
            post(server.port, f"/v1/sessions/{USER}-live/messages",
                 {"user_id": USER, "messages": messages, "wait": True}, timeout=120)  # fmt: skip
            settled = settle(server.proc.pid, args.settle_seconds)
            print(f"  {size:,}: the server was idle after {settled:.0f}s", flush=True)
            out = asyncio.run(measure(server.port, server.proc.pid, args))
            out["settle_seconds"] = settled
        finally:
            server.stop()
        out["build_seconds"] = build_seconds
        return out


def table(report: dict[str, Any]) -> str:
    clients = report["clients"]
    lines = [
        "| memories | path | "
        + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in clients)
        + " |",
        "|---|---|" + "---|" * len(clients),
    ]
    for size, res in report["sizes"].items():
        for path in ("recall", "context"):
            cells = []
            for c in clients:
                x = res[path][str(c)]
                if x["p50"] is None:
                    cells.append("errors")
                    continue
                # Server CPU per answer: the figure least coloured by a busy machine.
                per = 1000 * x["server_cpu"] / x["rate"] if x["rate"] else float("nan")
                cells.append(
                    f"{x['p50']:.1f} / {x['p99']:.1f} ms · {x['rate']:.0f}/s · "
                    f"cli {100 * x['client_cpu']:.0f}% · srv {per:.1f} ms CPU/req"
                )
            lines.append(f"| {int(size):,} | {path} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--table":  # re-print saved reports
        for path in sys.argv[2:]:
            saved = json.loads(Path(path).read_text())
            print(f"{saved['label']} ({path}):\n{table(saved)}\n")
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repo", type=Path, default=HERE.parent, help="the server's checkout")
    p.add_argument("--label", default="after")
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--clients", default="1,8,16")
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--quick", action="store_true", help="1k and 10k, 1 and 8 clients, 5 s")
    p.add_argument("--build-index", action="store_true")
    p.add_argument("--settle-seconds", type=float, default=600, help="0: measure at once")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.quick:
        args.sizes, args.clients, args.seconds = "1000,10000", "1,8", 5.0
    args.clients = [int(c) for c in args.clients.split(",")]
    args.repo = args.repo.resolve()
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    facts = machine_facts()
    print_machine(facts)
    print(f"server code: {args.repo} ({args.label})")
    report: dict[str, Any] = {
        "label": args.label,
        "repo": str(args.repo),
        "machine": facts,
        "clients": args.clients,
        "seconds": args.seconds,
        "sizes": {},
    }
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"  {size:,} memories", flush=True)
        report["sizes"][str(size)] = one_size(size, args, results)
    print(table(report))
    out = (
        args.out
        or results / f"scale-{args.label}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
