"""LongMemEval_S session-level retrieval: each question's haystack becomes its own user's
sessions in a running Strata; the question is recalled and the ranked memories are mapped
back to haystack sessions. Reported: recall_all@5/@10 (every evidence session in the top k,
the paper's metric) and recall_any@5/@10, beside in-process BM25-only, dense-only (the
bundled USE encoder) and plain-RRF baselines over the same user-turn keys.

Keys are USER turns, as in the paper. By default (`--turns user`) only the user turns are
ingested, so each key is indexed with the user turns before it as context; `--turns all`
ingests every turn as a deployment would hold it (assistant replies are ~7x longer than user
turns, so indexing is ~6x slower) and a result counts only if one of its sources is a user
turn (recall answers `sources[].message_id`, the client id, which says which turn it was). The
sessions' order is the order of their first user-turn result. A fixed sample of non-abstention
questions (`random.Random(seed).sample` over ids not ending in `_abs`, file order) is used;
`--questions N` takes the first N of that sample, so a quick run is a subset of the full one.

Usage: python bench/longmemeval.py --data longmemeval_s_cleaned_498.json.xz [--url URL]
    [--questions 100]
The data file is the user's own copy of LongMemEval (Wu et al., ICLR 2025).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchlib import (
    JSON,
    Api,
    fmt,
    machine_facts,
    print_machine,
    run_pool,
    summarize,
    wait_indexed,
    wait_ready,
    write_json,
)
from retrieval import BM25, Encoder, ranking, rrf, unique

KS = (5, 10)
SAMPLE = 100
MAX_CONTENT = 32_000
DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"  # "2023/05/20 (Sat) 07:47"
# LongMemEval paper (LongMemEval_M, session level, recall_all), for orientation only.
PAPER = {
    "Stella V5 1.5B, value key": {"recall_all@5": 0.706, "recall_all@10": 0.783},
    "BM25 (Table 9)": {"recall_all@5": 0.634},
}


@dataclass
class Turn:
    message_id: str
    role: str
    content: str


@dataclass
class HaySession:
    haystack_id: str
    session_id: str  # ours: haystack ids hold "_", which session ids may not
    created_at: datetime
    turns: list[Turn]


@dataclass
class Item:
    index: int
    question_id: str
    question_type: str
    question: str
    as_of: datetime
    evidence: list[str]  # haystack session ids
    user_id: str
    sessions: list[HaySession]


def parse_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=UTC)


def load(path: Path, n: int, seed: int, keep: str) -> tuple[list[Item], JSON]:
    with lzma.open(path, "rt", encoding="utf-8") as f:
        data: list[JSON] = json.load(f)
    pool = [q for q in data if not str(q["question_id"]).endswith("_abs")]
    chosen = random.Random(seed).sample(pool, min(SAMPLE, len(pool)))[:n]
    skipped_blank = truncated = empty_sessions = 0
    items: list[Item] = []
    for qi, q in enumerate(chosen):
        sessions: list[HaySession] = []
        for si, (hid, date, turns) in enumerate(
            zip(q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"], strict=True)
        ):
            kept: list[Turn] = []
            for ti, t in enumerate(turns):
                content = str(t["content"])
                if keep == "user" and t["role"] != "user":
                    continue
                if not content.strip():
                    skipped_blank += 1
                    continue
                if len(content) > MAX_CONTENT:
                    truncated += 1
                    content = content[:MAX_CONTENT]
                kept.append(Turn(f"t{ti}", t["role"], content))
            if not kept:  # a session with no turn to ingest is never created
                empty_sessions += 1
                continue
            sessions.append(HaySession(hid, f"lme{qi}-s{si}", parse_date(date), kept))
        last = max(s.created_at for s in sessions)
        as_of = max(parse_date(q["question_date"]), last) + timedelta(minutes=1)
        items.append(
            Item(
                qi,
                q["question_id"],
                q["question_type"],
                q["question"],
                as_of,
                list(q["answer_session_ids"]),
                f"lme-{qi}-{q['question_id']}",
                sessions,
            )
        )
    info: JSON = {
        "path": str(path),
        "questions_in_file": len(data),
        "non_abstention": len(pool),
        "sample": f"random.Random({seed}).sample(non-abstention, {SAMPLE})[:{n}]",
        "questions": len(items),
        "turns_ingested": keep,
        "blank_turns_skipped": skipped_blank,
        "turns_truncated": truncated,
        "sessions_without_turns": empty_sessions,
    }
    return items, info


# --------------------------------------------------------------------------- service


async def ingest(api: Api, items: list[Item], batch: int, concurrency: int, timeout: float) -> JSON:
    """One call per haystack session (the API takes one session per call; each holds well
    under `batch` turns), without wait; then the watermarks are polled until all indexed."""
    calls: list[tuple[Item, HaySession, list[JSON]]] = []
    for item in items:
        for s in item.sessions:
            msgs = [
                {
                    "id": t.message_id,
                    "role": t.role,
                    "content": t.content,
                    "created_at": (s.created_at + timedelta(seconds=i)).isoformat(),
                }
                for i, t in enumerate(s.turns)
            ]
            for first in range(0, len(msgs), batch):
                calls.append((item, s, msgs[first : first + batch]))
    accepted = failed = 0
    call_ms: list[float] = []

    async def one(call: tuple[Item, HaySession, list[JSON]]) -> None:
        nonlocal accepted, failed
        item, s, msgs = call
        data, ms = await api.ingest(s.session_id, item.user_id, msgs, False)
        call_ms.append(ms)
        if data is None:
            failed += 1
        else:
            accepted += data["accepted"]

    start = time.monotonic()
    await run_pool(calls, one, concurrency)
    ingest_s = time.monotonic() - start
    pairs = [(s.session_id, item.user_id) for item in items for s in item.sessions]
    caught_up, _ = await wait_indexed(api, pairs, timeout, poll=1.0)
    total_s = time.monotonic() - start
    return {
        "messages_sent": sum(len(c[2]) for c in calls),
        "accepted": accepted,
        "calls": len(calls),
        "failed_calls": failed,
        "ingest_seconds": ingest_s,
        "ingest_call_ms": summarize(call_ms),
        "all_indexed": caught_up,
        "indexed_after_seconds": total_s,
        "indexed_messages_per_s": accepted / total_s if caught_up and total_s > 0 else None,
    }


async def recall(
    api: Api, items: list[Item], top_k: int, concurrency: int, min_relevance: float | None = None
) -> JSON:
    """Per question: ranked haystack sessions from user-turn results, and from all results."""
    out: JSON = {}

    async def one(item: Item) -> None:
        roles = {(s.session_id, t.message_id): t.role for s in item.sessions for t in s.turns}
        hay = {s.session_id: s.haystack_id for s in item.sessions}
        body = {
            "user_id": item.user_id,
            "query": item.question,
            "top_k": top_k,
            "as_of": item.as_of.isoformat(),
            "reinforce": False,
        }
        if min_relevance is not None:
            body["min_relevance"] = min_relevance
        data, ms = await api.recall(body)
        if data is None:
            return
        user_sessions: list[str] = []
        all_sessions: list[str] = []
        for r in data["results"]:
            for src in r["sources"]:
                sid = hay.get(src["session_id"])
                if sid is None:
                    continue
                all_sessions.append(sid)
                if roles.get((src["session_id"], src["message_id"])) == "user":
                    user_sessions.append(sid)
        out[item.question_id] = {
            "user_keys": unique(user_sessions),
            "all_turns": unique(all_sessions),
            "results": len(data["results"]),
            "client_ms": ms,
            "took_ms": data["took_ms"],
        }

    await run_pool(items, one, concurrency)
    return out


# --------------------------------------------------------------------------- baselines


def baselines(items: list[Item], encoder: Encoder) -> dict[str, dict[str, list[str]]]:
    """BM25-only, dense-only and RRF(k=60) of both over each question's user turns."""
    out: dict[str, dict[str, list[str]]] = {"bm25": {}, "dense": {}, "rrf": {}}
    for item in items:
        keys = [
            (s.haystack_id, t.content) for s in item.sessions for t in s.turns if t.role == "user"
        ]
        texts = [k[1] for k in keys]
        bm = ranking(BM25(texts).scores(item.question))
        q = encoder.encode([item.question])[0]
        dense = ranking(encoder.encode(texts) @ q)
        for name, order in (("bm25", bm), ("dense", dense), ("rrf", rrf([bm, dense]))):
            out[name][item.question_id] = unique([keys[i][0] for i in order])
    return out


# --------------------------------------------------------------------------- metrics


def metrics(items: Sequence[Item], ranked: dict[str, list[str]]) -> JSON:
    answered = [i for i in items if i.question_id in ranked]
    n = len(answered)
    out: JSON = {"n": n}
    for k in KS:
        top = {i.question_id: set(ranked[i.question_id][:k]) for i in answered}
        out[f"recall_all@{k}"] = (
            sum(all(e in top[i.question_id] for e in i.evidence) for i in answered) / n
            if n
            else None
        )
        out[f"recall_any@{k}"] = (
            sum(any(e in top[i.question_id] for e in i.evidence) for i in answered) / n
            if n
            else None
        )
    return out


def print_table(rows: dict[str, JSON]) -> None:
    cols = [f"recall_{m}@{k}" for m in ("all", "any") for k in KS]
    print(f"{'':34s}" + "".join(f"{c:>16s}" for c in cols) + f"{'n':>6s}")
    for name, m in rows.items():
        print(f"{name:34s}" + "".join(f"{fmt(m[c], 3):>16s}" for c in cols) + f"{m['n']:>6d}")


# --------------------------------------------------------------------------- main


async def main_async(args: argparse.Namespace) -> int:
    facts = machine_facts()
    print_machine(facts)
    items, info = load(args.data, args.questions, args.seed, args.turns)
    n_turns = sum(len(s.turns) for i in items for s in i.sessions)
    n_user = sum(1 for i in items for s in i.sessions for t in s.turns if t.role == "user")
    print(
        f"LongMemEval_S: {info['questions']} questions ({info['sample']}; abstention questions "
        f"excluded), {sum(len(i.sessions) for i in items)} sessions, {n_turns} turns "
        f"({n_user} user turns; ingested: {args.turns} turns); "
        f"{info['blank_turns_skipped']} blank turns skipped, "
        f"{info['turns_truncated']} truncated to {MAX_CONTENT} characters; "
        f"{info['sessions_without_turns']} sessions without such turns left out"
    )
    types = Counter(i.question_type for i in items)
    print("question types: " + ", ".join(f"{t} {c}" for t, c in sorted(types.items())))

    async with Api(args.url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 60):
            print(f"server at {args.url} is not ready", file=sys.stderr)
            return 2
        if args.recall_only:
            ing: JSON = {"skipped": True}
            print("ingest: skipped (--recall-only: the server already holds the data)")
        else:
            ing = await ingest(api, items, args.batch, args.concurrency, args.index_timeout)
            print(
                f"ingest: {ing['accepted']}/{ing['messages_sent']} accepted in "
                f"{ing['calls']} calls, {ing['ingest_seconds']:.1f} s; all indexed="
                f"{ing['all_indexed']} after {ing['indexed_after_seconds']:.1f} s -> "
                f"{fmt(ing['indexed_messages_per_s'], 0)} messages/s"
            )
        start = time.monotonic()
        service = await recall(api, items, args.top_k, args.concurrency, args.min_relevance)
        recall_s = time.monotonic() - start
        took = summarize([v["took_ms"] for v in service.values()])
        print(
            f"recall: {len(service)}/{len(items)} ok, top_k={args.top_k}, {recall_s:.1f} s, "
            f"server took_ms p50 {fmt(took['p50'])} p95 {fmt(took['p95'])}"
        )
        errors = api.errors
    start = time.monotonic()
    encoder = Encoder(threads=2)
    base = baselines(items, encoder) if not args.no_baselines else {}
    baseline_s = time.monotonic() - start
    print(f"in-process baselines: {baseline_s:.1f} s")

    rows: dict[str, JSON] = {
        "Strata, user-turn keys": metrics(items, {q: v["user_keys"] for q, v in service.items()}),
        "Strata, all turns (reference)": metrics(
            items, {q: v["all_turns"] for q, v in service.items()}
        ),
    }
    for name, label in (("bm25", "BM25 only"), ("dense", "dense only (USE)"), ("rrf", "RRF k=60")):
        if name in base:
            rows[f"{label}, user turns"] = metrics(items, base[name])
    print()
    print("LongMemEval_S session-level retrieval (user turns as keys)")
    print_table(rows)
    by_type: dict[str, JSON] = {}
    for t in sorted(types):
        subset = [i for i in items if i.question_type == t]
        by_type[t] = {
            "strata": metrics(subset, {q: v["user_keys"] for q, v in service.items()}),
            **{name: metrics(subset, base[name]) for name in base},
        }
    print()
    print("recall_all@5 by question type (Strata / BM25 / dense):")
    for t, m in by_type.items():
        parts = [fmt(m["strata"]["recall_all@5"], 3)] + [
            fmt(m[name]["recall_all@5"], 3) for name in ("bm25", "dense") if name in m
        ]
        print(f"  {t:28s} {' / '.join(parts)}  (n={m['strata']['n']})")
    print()
    errors.print()

    per_question = []
    for i in items:
        row: JSON = {"question_id": i.question_id, "type": i.question_type, "evidence": i.evidence}
        v = service.get(i.question_id)
        if v:
            row["strata_user_keys_top10"] = v["user_keys"][:10]
        for name in base:
            ranked = base[name][i.question_id]
            row[f"{name}_rank"] = {
                e: (ranked.index(e) + 1 if e in ranked else None) for e in i.evidence
            }
        per_question.append(row)
    write_json(
        Path(args.out),
        {
            "benchmark": "longmemeval_s",
            "machine": facts,
            "args": {k: v for k, v in vars(args).items() if k != "api_key"},
            "dataset": info,
            "ingest": ing,
            "recall_seconds": recall_s,
            "recall_took_ms": took,
            "baseline_seconds": baseline_s,
            "metrics": rows,
            "by_type": by_type,
            "reference_paper": PAPER,
            "errors": errors.as_json(),
            "questions": per_question,
        },
    )
    return 0 if not errors.total else 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", required=True, type=Path, help="longmemeval_s_cleaned*.json.xz")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Strata base URL")
    p.add_argument(
        "--questions", type=int, default=SAMPLE, help=f"first N of the sample (≤ {SAMPLE})"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--turns",
        choices=("user", "all"),
        default="user",
        help="ingest only the user turns (the keys) or every turn",
    )
    p.add_argument("--top-k", type=int, default=200, help="results per recall (1..200)")
    p.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        help="recall's min_relevance (default: the service's own default)",
    )
    p.add_argument("--batch", type=int, default=1000, help="messages per ingest call")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--no-baselines", action="store_true")
    p.add_argument(
        "--recall-only",
        action="store_true",
        help="skip ingest: ask again a server whose data dir already holds the same sample "
        "(a query-time change costs the recall phase, not the import)",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/longmemeval.json"))
    p.add_argument("--index-timeout", type=float, default=7200)
    p.add_argument("--request-timeout", type=float, default=300)
    p.add_argument("--api-key", default=os.environ.get("STRATA_API_KEY"))
    args = p.parse_args(argv)
    if not 1 <= args.questions <= SAMPLE:
        p.error(f"--questions must be 1..{SAMPLE}")
    if not 1 <= args.top_k <= 200:
        p.error("--top-k must be 1..200")
    if not 1 <= args.batch <= 1000:
        p.error("--batch must be 1..1000")
    if not args.data.is_file():
        p.error(f"--data {args.data} is not a file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
