"""Service-level benchmark (docs/architecture.md §9) against a running Strata: ingest
latency and throughput, promotion throughput, recall and context latency under 8 concurrent
clients, and the server's resident memory.

Usage: python bench/latency.py [--url http://127.0.0.1:8000] [--memories 20000]
Synthetic bilingual (English / Chinese / mixed) text, generated from word lists with a seed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from benchlib import (
    JSON,
    Api,
    find_listening_pid,
    fmt,
    machine_facts,
    print_machine,
    process_memory,
    run_pool,
    summarize,
    wait_indexed,
    wait_ready,
    write_json,
)

# --------------------------------------------------------------------------- synthetic text

NAMES = ["Alice", "Bruno", "Carmen", "Deng Wei", "Elif", "Farah", "Goran", "Hiro", "Ines",
         "Jamal", "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa"]  # fmt: skip
VERBS = ["visited", "cooked", "painted", "repaired", "bought", "borrowed", "photographed",
         "studied", "sold", "planted", "wrote about", "practised with", "lost", "found",
         "ordered", "cleaned"]  # fmt: skip
OBJECTS = ["a red bicycle", "sourdough bread", "the garden fence", "an old guitar",
           "a mountain map", "jasmine tea", "a chess set", "the violin", "winter boots",
           "a telescope", "pork dumplings", "a paper kite", "a laptop charger", "a tomato plant",
           "the kitchen sink", "a vintage camera", "a yoga mat", "concert tickets"]  # fmt: skip
PLACES = ["in Lisbon", "at the night market", "near the harbour", "in Chengdu",
          "at the library", "in the park", "at her cousin's flat", "by the river", "in Shanghai",
          "at work", "in Kyoto", "at the train station", "in Nairobi", "at the gym"]  # fmt: skip
TIMES = ["last Tuesday", "this morning", "in March", "two weeks ago", "on her birthday",
         "after the concert", "during the holidays", "yesterday evening", "before dawn",
         "over the weekend"]  # fmt: skip
REASONS = ["because it was cheap", "to surprise a friend", "for the exam next month",
           "since the old one broke", "as a gift for her mother", "just for fun",
           "on a doctor's advice", "to save money"]  # fmt: skip
ZH_NAMES = ["小王", "李娜", "张伟", "陈静", "刘洋", "王芳", "赵磊", "孙丽", "周杰", "吴敏"]
ZH_PLACES = ["在北京", "在公园", "在图书馆", "在成都", "在海边", "在夜市", "在公司", "在老家",
             "在杭州", "在健身房"]  # fmt: skip
ZH_TIMES = ["昨天", "上周末", "今天早上", "三月份", "去年冬天", "下班后", "春节期间", "前天晚上"]
ZH_VERBS = ["买了", "做了", "修好了", "画了", "借了", "学习了", "种了", "卖掉了", "拍了",
            "丢了"]  # fmt: skip
ZH_OBJECTS = ["一辆自行车", "一本小说", "红烧肉", "一把吉他", "一幅山水画", "一壶绿茶",
              "一副象棋", "一双运动鞋", "一只风筝", "一盘饺子", "一台相机", "一盆兰花"]  # fmt: skip
ZH_FEELINGS = ["觉得很开心", "有点累", "非常满意", "想再去一次", "觉得太贵了", "心情不错",
               "打算告诉朋友"]  # fmt: skip


def english(rng: random.Random) -> str:
    text = (
        f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
        f"{rng.choice(PLACES)} {rng.choice(TIMES)}"
    )
    if rng.random() < 0.5:
        text += f" {rng.choice(REASONS)}"
    if rng.random() < 0.3:
        text += f", ticket #{rng.randint(100, 9999)}"
    return text + "."


def chinese(rng: random.Random) -> str:
    return (
        f"{rng.choice(ZH_NAMES)}{rng.choice(ZH_TIMES)}{rng.choice(ZH_PLACES)}"
        f"{rng.choice(ZH_VERBS)}{rng.choice(ZH_OBJECTS)}，{rng.choice(ZH_FEELINGS)}。"
    )


def sentence(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return english(rng)
    if roll < 0.7:
        return chinese(rng)
    if roll < 0.85:
        return f"{english(rng)} {chinese(rng)}"
    # Code-switched within one sentence.
    return (
        f"{rng.choice(ZH_NAMES)}{rng.choice(ZH_TIMES)} {rng.choice(PLACES)} "
        f"{rng.choice(VERBS)} {rng.choice(OBJECTS)}，{rng.choice(ZH_FEELINGS)}。"
    )


def message_text(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.choice((1, 1, 2, 3))))


def query_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.35:
        return f"What did {rng.choice(NAMES)} buy {rng.choice(PLACES)}?"
    if roll < 0.55:
        return f"Who {rng.choice(VERBS)} {rng.choice(OBJECTS)}?"
    if roll < 0.8:
        return f"{rng.choice(ZH_NAMES)}{rng.choice(ZH_PLACES)}{rng.choice(ZH_VERBS)}什么？"
    if roll < 0.9:
        return f"谁{rng.choice(ZH_VERBS)}{rng.choice(ZH_OBJECTS)}？"
    return f"When did {rng.choice(NAMES)} get {rng.choice(ZH_OBJECTS)}?"


def make_messages(rng: random.Random, prefix: str, count: int) -> list[JSON]:
    now = datetime.now(UTC).isoformat()
    return [
        {
            "id": f"{prefix}-{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": message_text(rng),
            "created_at": now,
            "metadata": {"name": "Ana" if i % 2 == 0 else "Bot"},
        }
        for i in range(count)
    ]


# --------------------------------------------------------------------------- helpers


@dataclass
class Row:
    path: str
    target: str
    measured: str
    ok: bool | None


def verdict(ok: bool | None) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[ok]


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def at_least(value: float | None, limit: float) -> bool | None:
    return None if value is None else value >= limit


# --------------------------------------------------------------------------- phases


async def single_ingest(api: Api, rng: random.Random, user: str, n: int) -> JSON:
    session = f"{user}-single"
    messages = make_messages(rng, "one", n)
    ms: list[float] = []
    failed = 0
    for message in messages:
        data, elapsed = await api.ingest(session, user, [message], False)
        if data is None:
            failed += 1
        else:
            ms.append(elapsed)
    return {"session": session, "requests": n, "failed": failed, "latency_ms": summarize(ms)}


async def batch_ingest(api: Api, rng: random.Random, user: str, total: int, size: int) -> JSON:
    session = f"{user}-batch"
    messages = make_messages(rng, "batch", total)
    batches = [messages[i : i + size] for i in range(0, total, size)]
    accepted = 0
    ms: list[float] = []
    start = time.monotonic()
    for batch in batches:
        data, elapsed = await api.ingest(session, user, batch, False)
        ms.append(elapsed)
        if data is not None:
            accepted += data["accepted"]
    seconds = time.monotonic() - start
    return {
        "session": session,
        "batch_size": size,
        "batches": len(batches),
        "accepted": accepted,
        "seconds": seconds,
        "messages_per_s": accepted / seconds if seconds > 0 else None,
        "call_ms": summarize(ms),
    }


async def load_and_promote(
    api: Api,
    rng: random.Random,
    user: str,
    total: int,
    per_session: int,
    batch: int,
    final_wait: bool,
    timeout: float,
) -> JSON:
    """Ingest `total` messages into sessions of `per_session`, in calls of `batch`, then time
    until every session's indexed_seq catches up with its last_seq (from the first call)."""
    sessions: list[str] = []
    calls: list[tuple[str, list[JSON]]] = []
    for s, lo in enumerate(range(0, total, per_session)):
        session = f"{user}-s{s}"
        sessions.append(session)
        messages = make_messages(rng, f"m{s}", min(per_session, total - lo))
        calls.extend((session, messages[i : i + batch]) for i in range(0, len(messages), batch))
    accepted = 0
    wait_answer: JSON | None = None
    wait_ms: float | None = None
    start = time.monotonic()
    for i, (session, chunk) in enumerate(calls):
        wait = final_wait and i == len(calls) - 1
        data, elapsed = await api.ingest(session, user, chunk, wait)
        if data is not None:
            accepted += data["accepted"]
        if wait:
            wait_answer, wait_ms = data, elapsed
    ingest_s = time.monotonic() - start
    caught_up, _ = await wait_indexed(api, [(s, user) for s in sessions], timeout)
    seconds = time.monotonic() - start
    return {
        "sessions": sessions,
        "messages": total,
        "accepted": accepted,
        "calls": len(calls),
        "ingest_seconds": ingest_s,
        "all_indexed": caught_up,
        "seconds_to_indexed": seconds,
        "messages_per_s": accepted / seconds if caught_up and seconds > 0 else None,
        "final_wait_ms": wait_ms,
        "final_wait_answer": wait_answer,
    }


async def count_memories(api: Api, user: str, expected: int) -> int | None:
    """Page through GET /v1/memories (bounded by the expected count)."""
    total = 0
    cursor: str | None = None
    for _ in range(expected // 200 + 50):
        path = f"/v1/memories?user_id={user}&limit=200" + (f"&cursor={cursor}" if cursor else "")
        data, _ = await api.request("GET", path, "list-memories")
        if data is None:
            return None
        total += len(data["items"])
        cursor = data.get("next_cursor")
        if not cursor:
            return total
    return total


async def recall_load(
    api: Api, rng: random.Random, user: str, n: int, concurrency: int, reinforce: bool
) -> JSON:
    queries = [query_text(rng) for _ in range(n)]

    async def one(query: str) -> tuple[float, float | None, int]:
        body = {"user_id": user, "query": query, "top_k": 10, "reinforce": reinforce}
        data, ms = await api.recall(body)
        if data is None:
            return ms, None, -1
        return ms, float(data["took_ms"]), len(data["results"])

    start = time.monotonic()
    out = await run_pool(queries, one, concurrency)
    seconds = time.monotonic() - start
    ok = [o for o in out if o[1] is not None]
    return {
        "queries": n,
        "ok": len(ok),
        "concurrency": concurrency,
        "reinforce": reinforce,
        "top_k": 10,
        "seconds": seconds,
        "queries_per_s": len(ok) / seconds if seconds > 0 else None,
        "client_ms": summarize([o[0] for o in ok]),
        "server_took_ms": summarize([o[1] for o in ok if o[1] is not None]),
        "empty_results": sum(1 for o in ok if o[2] == 0),
        "first_ms": out[0][0] if out else None,
    }


async def context_load(
    api: Api,
    rng: random.Random,
    user: str,
    sessions: Sequence[str],
    n: int,
    concurrency: int,
    budget: int,
) -> JSON:
    calls = [(rng.choice(sessions), query_text(rng)) for _ in range(n)]

    async def one(call: tuple[str, str]) -> tuple[float, int | None]:
        session, query = call
        body = {"user_id": user, "query": query, "token_budget": budget}
        data, ms = await api.context(session, body)
        return ms, None if data is None else int(data["tokens"]["total"])

    start = time.monotonic()
    out = await run_pool(calls, one, concurrency)
    seconds = time.monotonic() - start
    ok = [o for o in out if o[1] is not None]
    totals = [o[1] for o in ok if o[1] is not None]
    return {
        "calls": n,
        "ok": len(ok),
        "concurrency": concurrency,
        "token_budget": budget,
        "seconds": seconds,
        "client_ms": summarize([o[0] for o in ok]),
        "tokens_total": summarize([float(t) for t in totals]),
        "over_budget": sum(1 for t in totals if t > budget),
    }


# --------------------------------------------------------------------------- main


async def main_async(args: argparse.Namespace) -> int:
    facts = machine_facts()
    print_machine(facts)
    rng = random.Random(args.seed)
    run = args.run_id or f"{int(time.time())}"
    port = urlsplit(args.url).port or 80
    pid = args.pid or find_listening_pid(port)
    rss_start = process_memory(pid) if pid else None
    print(f"server: {args.url} (pid {pid or 'not found'}), run id {run}")
    result: JSON = {
        "benchmark": "latency",
        "machine": facts,
        "run_id": run,
        "args": {k: v for k, v in vars(args).items() if k != "api_key"},
    }
    rows: list[Row] = []

    async with Api(args.url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 60):
            print(f"server at {args.url} is not ready", file=sys.stderr)
            return 2

        # (a) one message per request, sequential
        user_ingest = f"bench-{run}-ingest"
        a = await single_ingest(api, rng, user_ingest, args.single)
        result["ingest_single"] = a
        lat = a["latency_ms"]
        print(
            f"(a) ingest 1 msg/request x{args.single}: p50 {fmt(lat['p50'], 2)} ms, "
            f"p99 {fmt(lat['p99'], 2)} ms, failed {a['failed']}"
        )
        rows.append(
            Row(
                "ingest, one message per request: p50",
                "<= 5 ms",
                f"{fmt(lat['p50'], 2)} ms",
                at_most(lat["p50"], 5),
            )
        )
        rows.append(
            Row(
                "ingest, one message per request: p99",
                "<= 20 ms",
                f"{fmt(lat['p99'], 2)} ms",
                at_most(lat["p99"], 20),
            )
        )

        # (b) batches of 200
        b = await batch_ingest(api, rng, user_ingest, args.batch_total, args.batch_size)
        result["ingest_batches"] = b
        print(
            f"(b) ingest {b['batches']} batches of {args.batch_size}: "
            f"{fmt(b['messages_per_s'], 0)} messages/s "
            f"(call p50 {fmt(b['call_ms']['p50'])} ms)"
        )
        rows.append(
            Row(
                f"ingest, batches of {args.batch_size}",
                ">= 5,000 msg/s",
                f"{fmt(b['messages_per_s'], 0)} msg/s",
                at_least(b["messages_per_s"], 5000),
            )
        )

        # Let the worker drain (a) and (b) so (c) starts from an idle index.
        drained, drain_s = await wait_indexed(
            api, [(a["session"], user_ingest), (b["session"], user_ingest)], args.index_timeout
        )
        result["drain_after_ingest"] = {"all_indexed": drained, "seconds": drain_s}
        print(f"    backlog of (a)+(b) indexed={drained} {drain_s:.1f} s after (b) finished")

        # (c) promotion throughput
        c = await load_and_promote(
            api,
            rng,
            f"bench-{run}-promo",
            args.promotion_messages,
            per_session=args.promotion_messages // max(1, args.promotion_sessions) or 1,
            batch=1000,
            final_wait=False,
            timeout=args.index_timeout,
        )
        result["promotion"] = c
        print(
            f"(c) promotion of {c['accepted']} messages in {len(c['sessions'])} sessions: "
            f"indexed={c['all_indexed']} after {c['seconds_to_indexed']:.1f} s -> "
            f"{fmt(c['messages_per_s'], 0)} messages/s"
        )
        rows.append(
            Row(
                "promotion (log -> indexed memories)",
                ">= 500 msg/s",
                f"{fmt(c['messages_per_s'], 0)} msg/s",
                at_least(c["messages_per_s"], 500),
            )
        )

        # (d) recall over a user with M memories
        user_recall = f"bench-{run}-recall"
        load = await load_and_promote(
            api,
            rng,
            user_recall,
            args.memories,
            per_session=args.session_turns,
            batch=1000,
            final_wait=True,
            timeout=args.index_timeout,
        )
        memories = await count_memories(api, user_recall, args.memories)
        load["memories"] = memories
        result["recall_load"] = load
        print(
            f"(d) loaded {load['accepted']} messages -> {memories} memories; indexed="
            f"{load['all_indexed']} after {load['seconds_to_indexed']:.1f} s "
            f"({fmt(load['messages_per_s'], 0)} messages/s; final wait=true call "
            f"{fmt(load['final_wait_ms'], 0)} ms)"
        )
        # Warm-up (first calls of a fresh process load lazy state): timed, but kept apart.
        warm = await recall_load(api, rng, user_recall, args.warmup, 1, False)
        result["recall_warmup"] = warm
        print(
            f"    warm-up: {args.warmup} sequential recalls, first "
            f"{fmt(warm['first_ms'])} ms, max {fmt(warm['client_ms']['max'])} ms"
        )
        recall_rows: list[JSON] = []
        modes = [(args.baseline_queries, 1, False)] if args.baseline_queries else []
        modes += [(args.queries, args.concurrency, False), (args.queries, args.concurrency, True)]
        for queries, concurrency, reinforce in modes:
            d = await recall_load(api, rng, user_recall, queries, concurrency, reinforce)
            recall_rows.append(d)
            cl, sv = d["client_ms"], d["server_took_ms"]
            print(
                f"    recall x{d['ok']}/{d['queries']}, {concurrency} concurrent, "
                f"reinforce={reinforce}: client p50 {fmt(cl['p50'])} ms p99 {fmt(cl['p99'])} "
                f"ms; server took_ms p50 {fmt(sv['p50'])} p99 {fmt(sv['p99'])}; "
                f"{fmt(d['queries_per_s'], 0)} q/s"
            )
            label = (
                f"recall, {memories or args.memories} memories, {concurrency} client"
                f"{'s' if concurrency > 1 else ''}, reinforce={reinforce}"
            )
            rows.append(
                Row(
                    f"{label}: p50",
                    "<= 10 ms (at 100k)",
                    f"{fmt(cl['p50'])} ms",
                    at_most(cl["p50"], 10),
                )
            )
            rows.append(
                Row(
                    f"{label}: p99",
                    "<= 40 ms (at 100k)",
                    f"{fmt(cl['p99'])} ms",
                    at_most(cl["p99"], 40),
                )
            )
        result["recall"] = recall_rows

        # (e) context
        e = await context_load(
            api,
            rng,
            user_recall,
            load["sessions"],
            args.context_calls,
            args.concurrency,
            args.context_budget,
        )
        result["context"] = e
        cl = e["client_ms"]
        print(
            f"(e) context x{e['ok']}/{e['calls']}, budget {args.context_budget}, "
            f"{args.concurrency} concurrent: p50 {fmt(cl['p50'])} ms, p99 {fmt(cl['p99'])} "
            f"ms; over budget {e['over_budget']}"
        )
        rows.append(
            Row(
                f"context, token_budget {args.context_budget}: p50",
                "<= 20 ms",
                f"{fmt(cl['p50'])} ms",
                at_most(cl["p50"], 20),
            )
        )
        rows.append(
            Row(
                f"context, token_budget {args.context_budget}: p99",
                "<= 60 ms",
                f"{fmt(cl['p99'])} ms",
                at_most(cl["p99"], 60),
            )
        )

        # (f) resident memory
        rss_end = process_memory(pid) if pid else None
        result["rss"] = {"start": rss_start, "end": rss_end}
        if rss_end:
            print(
                f"(f) server RSS: start {fmt((rss_start or {}).get('vmrss_mib'), 0)} "
                f"MiB, end {fmt(rss_end.get('vmrss_mib'), 0)} MiB, peak "
                f"{fmt(rss_end.get('vmhwm_mib'), 0)} MiB; at the end "
                f"{fmt(rss_end.get('rssanon_mib'), 0)} MiB anonymous, "
                f"{fmt(rss_end.get('rssfile_mib'), 0)} MiB of mapped files"
            )
            peak = rss_end.get("vmhwm_mib")
            rows.append(
                Row(
                    "api process RSS (peak) with the local model",
                    "<= 600 MB",
                    f"{fmt(peak, 0)} MiB",
                    at_most(peak, 600),
                )
            )
        else:
            print("(f) server RSS: process not found (pass --pid)")
            rows.append(Row("api process RSS with the local model", "<= 600 MB", "n/a", None))

        result["errors"] = api.errors.as_json()
        errors = api.errors

    result["table"] = [vars(r) for r in rows]
    print()
    print("Service levels (docs/architecture.md §9; targets are for a 2-core machine)")
    width = max(len(r.path) for r in rows)
    print(f"{'path':{width}s}  {'target':20s}  {'measured':14s}  meets")
    for r in rows:
        print(f"{r.path:{width}s}  {r.target:20s}  {r.measured:14s}  {verdict(r.ok)}")
    print()
    errors.print()
    write_json(Path(args.out), result)
    return 0 if not errors.total else 1


def build_parser() -> argparse.ArgumentParser:
    """The command line; bench/report.py names a run's arguments that differ from its defaults."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Strata base URL")
    p.add_argument("--out", type=Path, default=Path("bench/results/latency.json"))
    p.add_argument("--pid", type=int, help="server pid for RSS (default: found by port)")
    p.add_argument("--single", type=int, default=500, help="(a) one-message requests")
    p.add_argument("--batch-size", type=int, default=200, help="(b) messages per request")
    p.add_argument("--batch-total", type=int, default=10_000, help="(b) messages in all")
    p.add_argument("--promotion-messages", type=int, default=5000, help="(c)")
    p.add_argument("--promotion-sessions", type=int, default=5, help="(c) spread over")
    p.add_argument("--memories", type=int, default=20_000, help="(d) messages for the user")
    p.add_argument(
        "--session-turns", type=int, default=1000, help="(d) turns per session; (e) packs these"
    )
    p.add_argument("--queries", type=int, default=2000, help="(d) recalls per mode")
    p.add_argument("--baseline-queries", type=int, default=200, help="(d) sequential, 0: skip")
    p.add_argument("--warmup", type=int, default=20, help="(d) recalls before measuring")
    p.add_argument("--context-calls", type=int, default=500, help="(e)")
    p.add_argument("--context-budget", type=int, default=4000, help="(e)")
    p.add_argument("--concurrency", type=int, default=8, help="(d), (e) clients")
    p.add_argument("--index-timeout", type=float, default=1800, help="seconds per wait")
    p.add_argument("--request-timeout", type=float, default=120)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--run-id", help="suffix of the user ids (default: unix time)")
    p.add_argument("--api-key", default=os.environ.get("STRATA_API_KEY"))
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    bounds = {
        "single": (1, 100_000),
        "batch_size": (1, 1000),
        "batch_total": (1, 1_000_000),
        "promotion_messages": (1, 1_000_000),
        "promotion_sessions": (1, 1000),
        "memories": (1, 1_000_000),
        "session_turns": (1, 100_000),
        "queries": (1, 1_000_000),
        "warmup": (1, 10_000),
        "baseline_queries": (0, 1_000_000),
        "context_calls": (1, 100_000),
        "context_budget": (1, 200_000),
        "concurrency": (1, 64),
    }
    for name, (lo, hi) in bounds.items():
        if not lo <= getattr(args, name) <= hi:
            p.error(f"--{name.replace('_', '-')} must be {lo}..{hi}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
