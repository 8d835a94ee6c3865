"""LoCoMo retrieval benchmark: ingest the conversations into a running Strata, then measure
turn-level evidence recall of `POST /v1/recall` (R@k and recall within a token budget), recall
and context latency, and ingest and promotion throughput.

Usage: python bench/locomo.py --data /path/to/locomo10.json [--url http://127.0.0.1:8000]
The data file is the user's own copy of LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import toktok
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

KS = (5, 10, 25, 50)
BUDGETS = (500, 1000, 2000)
TOP_K = 50
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# LoCoMo paper, Table 3: DRAGON retriever, turn-level evidence recall over all categories.
DRAGON = {5: 0.567, 10: 0.662, 25: 0.767, 50: 0.827}
SESSION_KEY = re.compile(r"session_(\d+)")
EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


# --------------------------------------------------------------------------- dataset


@dataclass
class Session:
    number: int
    session_id: str
    created_at: datetime
    messages: list[JSON]


@dataclass
class Question:
    conv: int
    index: int
    question: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    index: int
    sample_id: str
    user_id: str
    sessions: list[Session]
    questions: list[Question]
    skipped_questions: int = 0
    dropped_evidence: list[str] = field(default_factory=list)

    @property
    def as_of(self) -> datetime:
        return max(s.created_at for s in self.sessions) + timedelta(days=1)

    @property
    def last_session(self) -> Session:
        return max(self.sessions, key=lambda s: s.created_at)


def parse_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=UTC)


def normalise_evidence(raw: Sequence[str]) -> list[str]:
    """'D8:6; D9:17' -> two ids, 'D:11:26' -> 'D11:26', 'D30:05' -> 'D30:5'; order kept,
    duplicates dropped."""
    out: list[str] = []
    for item in raw:
        for token in EVIDENCE_SPLIT.split(item):
            if not token:
                continue
            match = EVIDENCE_ID.fullmatch(token)
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}" if match else token
            if dia_id not in out:
                out.append(dia_id)
    return out


def load_conversations(path: Path, limit: int) -> list[Conversation]:
    data: list[JSON] = json.loads(path.read_text())
    conversations: list[Conversation] = []
    for i, sample in enumerate(data[:limit]):
        conv = sample["conversation"]
        speaker_a = conv["speaker_a"]
        numbers = sorted(
            int(m.group(1)) for key in conv if (m := SESSION_KEY.fullmatch(key)) is not None
        )
        sessions: list[Session] = []
        dia_ids: set[str] = set()
        for n in numbers:
            turns = conv[f"session_{n}"]
            if not turns:
                continue
            when = parse_time(conv[f"session_{n}_date_time"])
            created = when.isoformat()
            messages: list[JSON] = []
            for turn in turns:  # file order is conversation order; all share the session time
                content = turn["text"]
                if turn.get("blip_caption"):
                    content = f"{content} [shares a photo: {turn['blip_caption']}]"
                messages.append(
                    {
                        "id": turn["dia_id"],
                        "role": "user" if turn["speaker"] == speaker_a else "assistant",
                        "content": content,
                        "created_at": created,
                        "metadata": {"name": turn["speaker"]},
                    }
                )
                dia_ids.add(turn["dia_id"])
            sessions.append(Session(n, f"conv{i}-session{n}", when, messages))
        sample_id = str(sample.get("sample_id") or i)
        item = Conversation(i, sample_id, f"locomo-{sample_id}", sessions, [])
        for j, qa in enumerate(sample["qa"]):
            evidence = normalise_evidence(qa.get("evidence") or [])
            valid = [e for e in evidence if e in dia_ids]
            item.dropped_evidence.extend(e for e in evidence if e not in dia_ids)
            if not valid:
                item.skipped_questions += 1
                continue
            item.questions.append(Question(i, j, qa["question"], int(qa["category"]), valid))
        conversations.append(item)
    return conversations


# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- phases


async def ingest(api: Api, conversations: list[Conversation], index_timeout: float) -> JSON:
    """Every session in one call, without wait; then poll the watermarks until all indexed."""
    call_ms: list[float] = []
    accepted = duplicates = sent = failed_calls = 0
    start = time.monotonic()
    for conv in conversations:
        for session in conv.sessions:
            data, ms = await api.ingest(session.session_id, conv.user_id, session.messages, False)
            call_ms.append(ms)
            sent += len(session.messages)
            if data is None:
                failed_calls += 1
                continue
            accepted += data["accepted"]
            duplicates += data["duplicates"]
    ingest_s = time.monotonic() - start
    sessions = [(s.session_id, c.user_id) for c in conversations for s in c.sessions]
    caught_up, _ = await wait_indexed(api, sessions, index_timeout)
    promotion_s = time.monotonic() - start
    return {
        "messages_sent": sent,
        "accepted": accepted,
        "duplicates": duplicates,
        "calls": len(call_ms),
        "failed_calls": failed_calls,
        "ingest_seconds": ingest_s,
        "ingest_messages_per_s": accepted / ingest_s if ingest_s > 0 else None,
        "ingest_call_ms": summarize(call_ms),
        "all_indexed": caught_up,
        "promotion_seconds": promotion_s,
        "promotion_messages_per_s": accepted / promotion_s if caught_up and accepted else None,
    }


@dataclass
class Answer:
    question: Question
    ok: bool
    client_ms: float
    took_ms: float | None
    ranked_ids: list[list[str]]  # per result, the dia_ids of its sources
    contents: list[str]
    tokens: list[int] = field(default_factory=list)


async def recall_all(
    api: Api,
    conversations: list[Conversation],
    concurrency: int,
    min_relevance: float | None = None,
) -> list[Answer]:
    by_index = {c.index: c for c in conversations}
    questions = [q for c in conversations for q in c.questions]

    async def one(q: Question) -> Answer:
        conv = by_index[q.conv]
        body = {
            "user_id": conv.user_id,
            "query": q.question,
            "top_k": TOP_K,
            "as_of": conv.as_of.isoformat(),
            "reinforce": False,
        }
        if min_relevance is not None:
            body["min_relevance"] = min_relevance
        data, ms = await api.recall(body)
        if data is None:
            return Answer(q, False, ms, None, [], [])
        prefix = f"conv{q.conv}-session"
        ranked = [
            [s["message_id"] for s in r["sources"] if s["session_id"].startswith(prefix)]
            for r in data["results"]
        ]
        return Answer(q, True, ms, data["took_ms"], ranked, [r["content"] for r in data["results"]])

    answers = await run_pool(questions, one, concurrency)
    # Token counts after the timed phase: a batch per run, not on the event loop mid-benchmark.
    flat = [text for a in answers for text in a.contents]
    counts: list[int] = list(toktok.batch_count(flat, "o200k_base")) if flat else []
    pos = 0
    for a in answers:
        a.tokens = counts[pos : pos + len(a.contents)]
        pos += len(a.contents)
    return answers


def recall_at(answer: Answer, k: int) -> float:
    found = {d for ids in answer.ranked_ids[:k] for d in ids}
    evidence = answer.question.evidence
    return sum(1 for e in evidence if e in found) / len(evidence)


def budget_recall(answer: Answer, budget: int) -> float:
    """Results in rank order until the first that would overflow the budget (no skipping)."""
    found: set[str] = set()
    used = 0
    for ids, tokens in zip(answer.ranked_ids, answer.tokens, strict=True):
        if used + tokens > budget:
            break
        used += tokens
        found.update(ids)
    evidence = answer.question.evidence
    return sum(1 for e in evidence if e in found) / len(evidence)


def metrics(answers: Sequence[Answer]) -> JSON:
    n = len(answers)
    out: JSON = {"n": n}
    for k in KS:
        out[f"R@{k}"] = sum(recall_at(a, k) for a in answers) / n if n else None
    for b in BUDGETS:
        out[f"B{b}"] = sum(budget_recall(a, b) for a in answers) / n if n else None
    return out


async def context_calls(
    api: Api, conversations: list[Conversation], count: int, concurrency: int, budget: int
) -> JSON:
    by_index = {c.index: c for c in conversations}
    questions = [q for c in conversations for q in c.questions]
    if count <= 0 or not questions:
        return {"calls": 0}
    step = max(1.0, len(questions) / count)
    picked = [questions[int(i * step)] for i in range(min(count, len(questions)))]

    async def one(q: Question) -> tuple[float, JSON | None]:
        conv = by_index[q.conv]
        body = {
            "user_id": conv.user_id,
            "query": q.question,
            "token_budget": budget,
            "as_of": conv.as_of.isoformat(),
        }
        data, ms = await api.context(conv.last_session.session_id, body)
        return ms, data

    results = await run_pool(picked, one, concurrency)
    ok = [(ms, d) for ms, d in results if d is not None]
    totals = [d["tokens"]["total"] for _, d in ok]
    return {
        "calls": len(picked),
        "ok": len(ok),
        "token_budget": budget,
        "latency_ms": summarize([ms for ms, _ in ok]),
        "tokens_total": summarize([float(t) for t in totals]),
        "over_budget": sum(1 for t in totals if t > budget),
        "memories_per_call": summarize([float(len(d["sections"]["memories"])) for _, d in ok]),
    }


def _flat(text: str) -> str:
    """Whitespace collapsed: the context indents an item's further lines (`set_off`)."""
    return " ".join(text.split())


async def context_evidence(
    api: Api, conversations: list[Conversation], budgets: Sequence[int], concurrency: int
) -> JSON:
    """Every question asked of the context (its `query`, the conversation's last session,
    `as_of` set) at each budget: the share of evidence turns whose whole text is in `text`
    (as a memory, a recent turn, or inside an extractive summary)."""
    by_index = {c.index: c for c in conversations}
    turns = {
        (c.index, m["id"]): _flat(m["content"])
        for c in conversations
        for s in c.sessions
        for m in s.messages
    }
    questions = [q for c in conversations for q in c.questions]
    out: JSON = {}
    for budget in budgets:

        async def one(q: Question, budget: int = budget) -> tuple[Question, JSON | None]:
            conv = by_index[q.conv]
            body = {
                "user_id": conv.user_id,
                "query": q.question,
                "token_budget": budget,
                "as_of": conv.as_of.isoformat(),
            }
            data, _ = await api.context(conv.last_session.session_id, body)
            return q, data

        results = await run_pool(questions, one, concurrency)
        found = total = 0
        ok = [(q, d) for q, d in results if d is not None]
        for q, d in ok:
            text = _flat(d["text"])
            total += len(q.evidence)
            found += sum(1 for e in q.evidence if turns[(q.conv, e)] in text)
        tokens = [d["tokens"] for _, d in ok]
        out[str(budget)] = {
            "questions": len(questions),
            "ok": len(ok),
            "evidence": total,
            "evidence_in_text": found / total if total else None,
            "over_budget": sum(1 for t in tokens if t["total"] > budget),
            "memories_tokens": summarize([float(t.get("memories", 0)) for t in tokens]),
            "summaries_tokens": summarize([float(t.get("summaries", 0)) for t in tokens]),
            "recent_tokens": summarize([float(t.get("recent_messages", 0)) for t in tokens]),
            "memories_per_call": summarize([float(len(d["sections"]["memories"])) for _, d in ok]),
        }
    return out


# --------------------------------------------------------------------------- report


def print_table(overall: JSON, per_category: dict[str, JSON]) -> None:
    head = "R@5    R@10   R@25   R@50  |  B500   B1000  B2000"
    print(f"{'':22s}{'n':>6s}  {head}")

    def row(label: str, m: JSON) -> None:
        cells = "  ".join(fmt(m[f"R@{k}"], 3) for k in KS)
        budgets = "  ".join(fmt(m[f"B{b}"], 3) for b in BUDGETS)
        print(f"{label:22s}{m['n']:6d}  {cells} |  {budgets}")

    row("all", overall)
    for label, m in per_category.items():
        row(label, m)
    dragon = "  ".join(f"{DRAGON[k]:.3f}" for k in KS)
    print(f"{'DRAGON (LoCoMo paper)':22s}{'':6s}  {dragon} |    -      -      -")


def _print_ingest(ing: JSON) -> None:
    print(
        f"ingest: {ing['accepted']} accepted, {ing['duplicates']} duplicates in "
        f"{ing['calls']} calls, {ing['ingest_seconds']:.1f} s -> "
        f"{fmt(ing['ingest_messages_per_s'], 0)} messages/s "
        f"(call p50 {fmt(ing['ingest_call_ms']['p50'])} ms, "
        f"p95 {fmt(ing['ingest_call_ms']['p95'])} ms)"
    )
    if ing["duplicates"]:
        print(
            "  warning: duplicates mean this server already held the data; "
            "throughput figures are not meaningful (use a fresh data dir)"
        )
    print(
        f"promotion: all indexed={ing['all_indexed']} after {ing['promotion_seconds']:.1f} s "
        f"from first ingest -> {fmt(ing['promotion_messages_per_s'], 0)} messages/s"
    )


async def main_async(args: argparse.Namespace) -> int:
    facts = machine_facts()
    print_machine(facts)
    conversations = load_conversations(Path(args.data), args.conversations)
    n_sessions = sum(len(c.sessions) for c in conversations)
    n_turns = sum(len(s.messages) for c in conversations for s in c.sessions)
    n_questions = sum(len(c.questions) for c in conversations)
    skipped = sum(c.skipped_questions for c in conversations)
    dropped = [e for c in conversations for e in c.dropped_evidence]
    print(
        f"LoCoMo: {len(conversations)} conversations, {n_sessions} sessions, {n_turns} turns, "
        f"{n_questions} questions with evidence ({skipped} skipped without valid evidence; "
        f"evidence ids matching no turn: {dropped})"
    )

    async with Api(args.url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 60):
            print(f"server at {args.url} is not ready", file=sys.stderr)
            return 2
        print(f"server: {args.url}")

        if args.recall_only:
            ing = {"skipped": True}
            print("ingest: skipped (--recall-only: the server already holds the data)")
        else:
            ing = await ingest(api, conversations, args.index_timeout)
            _print_ingest(ing)

        start = time.monotonic()
        answers = await recall_all(api, conversations, args.concurrency, args.min_relevance)
        recall_s = time.monotonic() - start
        good = [a for a in answers if a.ok]
        client = summarize([a.client_ms for a in good])
        server = summarize([a.took_ms for a in good if a.took_ms is not None])
        print(
            f"recall: {len(good)}/{len(answers)} ok, top_k={TOP_K}, concurrency "
            f"{args.concurrency}, {recall_s:.1f} s; client ms p50 {fmt(client['p50'])} "
            f"p95 {fmt(client['p95'])} p99 {fmt(client['p99'])}; server took_ms p50 "
            f"{fmt(server['p50'])} p95 {fmt(server['p95'])} p99 {fmt(server['p99'])}"
        )
        short = sum(1 for a in good if len(a.ranked_ids) < TOP_K)
        if short:
            print(f"  note: {short} recalls answered fewer than {TOP_K} results")

        ctx = await context_calls(
            api, conversations, args.context_calls, args.concurrency, args.context_budget
        )
        if ctx["calls"]:
            lat = ctx["latency_ms"]
            print(
                f"context: {ctx['ok']}/{ctx['calls']} ok, token_budget {ctx['token_budget']}, "
                f"p50 {fmt(lat['p50'])} ms, p95 {fmt(lat['p95'])} ms, p99 {fmt(lat['p99'])} ms; "
                f"tokens p50 {fmt(ctx['tokens_total']['p50'], 0)}, over budget "
                f"{ctx['over_budget']}"
            )

        evidence_ctx: JSON = {}
        if args.context_budgets:
            evidence_ctx = await context_evidence(
                api, conversations, args.context_budgets, args.concurrency
            )
            print("evidence in one context call (share of evidence turns whose text is in `text`):")
            for budget, m in evidence_ctx.items():
                print(
                    f"  {budget:>6s} tokens: {fmt(m['evidence_in_text'], 3)} of {m['evidence']} "
                    f"({m['ok']}/{m['questions']} ok, over budget {m['over_budget']}); "
                    f"memories p50 {fmt(m['memories_per_call']['p50'], 0)} "
                    f"({fmt(m['memories_tokens']['p50'], 0)} tokens), recent turns p50 "
                    f"{fmt(m['recent_tokens']['p50'], 0)} tokens, summaries p50 "
                    f"{fmt(m['summaries_tokens']['p50'], 0)} tokens"
                )

        overall = metrics(good)
        by_cat: dict[int, list[Answer]] = defaultdict(list)
        by_conv: dict[int, list[Answer]] = defaultdict(list)
        for a in good:
            by_cat[a.question.category].append(a)
            by_conv[a.question.conv].append(a)
        per_category = {f"{c} {CATEGORIES.get(c, '?')}": metrics(by_cat[c]) for c in sorted(by_cat)}
        per_conversation = {c.user_id: metrics(by_conv[c.index]) for c in conversations}
        print()
        print(
            f"LoCoMo turn-level evidence recall (top_k={TOP_K}, budgets in o200k tokens "
            f"of result content)"
        )
        print_table(overall, per_category)
        print()
        print(
            "per conversation R@10: "
            + ", ".join(f"{uid} {fmt(m['R@10'], 3)}" for uid, m in per_conversation.items())
        )
        print()
        api.errors.print()

        result: JSON = {
            "benchmark": "locomo",
            "machine": facts,
            "args": {k: v for k, v in vars(args).items() if k != "api_key"},
            "dataset": {
                "path": str(args.data),
                "conversations": len(conversations),
                "sessions": n_sessions,
                "turns": n_turns,
                "questions": n_questions,
                "skipped_questions": skipped,
                "dropped_evidence_ids": dropped,
            },
            "ingest": ing,
            "recall": {
                "top_k": TOP_K,
                "min_relevance": args.min_relevance,
                "concurrency": args.concurrency,
                "seconds": recall_s,
                "ok": len(good),
                "failed": len(answers) - len(good),
                "client_ms": client,
                "server_took_ms": server,
                "overall": overall,
                "per_category": per_category,
                "per_conversation": per_conversation,
                "reference_dragon": {f"R@{k}": v for k, v in DRAGON.items()},
            },
            "context": ctx,
            "context_evidence": evidence_ctx,
            "errors": api.errors.as_json(),
            "questions": [
                {
                    "conv": a.question.conv,
                    "qa": a.question.index,
                    "category": a.question.category,
                    "evidence": a.question.evidence,
                    "evidence_rank": {
                        e: next((r + 1 for r, ids in enumerate(a.ranked_ids) if e in ids), None)
                        for e in a.question.evidence
                    },
                    "took_ms": a.took_ms,
                    "ranked": a.ranked_ids,
                }
                for a in good
            ],
        }
    write_json(Path(args.out), result)
    return 0 if not api.errors.total else 1


def build_parser() -> argparse.ArgumentParser:
    """The command line; bench/report.py names a run's arguments that differ from its defaults."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Strata base URL")
    p.add_argument("--conversations", type=int, default=10, help="the first N conversations")
    p.add_argument("--out", type=Path, default=Path("bench/results/locomo.json"))
    p.add_argument("--concurrency", type=int, default=4, help="recall/context calls in flight")
    p.add_argument("--context-calls", type=int, default=200, help="context calls (0: none)")
    p.add_argument("--context-budget", type=int, default=4000)
    p.add_argument(
        "--context-budgets",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        help="e.g. 1000,2000,4000: every question asked of the context at each budget, the "
        "share of evidence turns whose text is in its `text`",
    )
    p.add_argument(
        "--index-timeout",
        type=float,
        default=1800,
        help="seconds to wait for promotion to catch up",
    )
    p.add_argument(
        "--recall-only",
        action="store_true",
        help="skip ingest: the server's data dir already holds these conversations",
    )
    p.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        help="recall's min_relevance (default: the service's own default)",
    )
    p.add_argument("--request-timeout", type=float, default=120)
    p.add_argument("--api-key", default=os.environ.get("STRATA_API_KEY"))
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if not 1 <= args.conversations <= 1000:
        p.error("--conversations must be at least 1")
    if not 1 <= args.concurrency <= 64:
        p.error("--concurrency must be 1..64")
    if not args.data.is_file():
        p.error(f"--data {args.data} is not a file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
