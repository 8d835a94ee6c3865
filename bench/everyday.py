"""Everyday questions (issue 40): short histories of the kind people really have with an
assistant (fillers, short replies, pronouns), one paraphrased question each, in English,
Chinese and across the two, plus questions about things never mentioned.

Every history of `bench/data/everyday.json` is ingested as a user of its own (`wait=true`,
fresh ids per run), then its question is recalled over that user (`top_k=10`,
`reinforce=false`, no `session_id`) twice: with the service's defaults and with
`min_relevance: 0` (the ranking without the floor). Reported, per language and overall:

- hit@1 / hit@3: the answer turn is among the first 1 / 3 results (a result's `sources`
  hold its message id, or its `content` holds the turn's text);
- hidden by the floor: the answer ranks first without the floor and nothing (or something
  else) is returned with the defaults;
- fillers above the answer: turns the set marks as filler ("Nice!", "How do you like it?",
  "好的") ranked above the answer turn without the floor (a filler counts when the answer is
  missing, too);
- updated facts: the newer statement above the older one, without the floor;
- never mentioned: the share of those questions left with no result by the defaults, and
  their top `scores.semantic`.

A few failures are printed with the question and the top result, to be read.

Usage: python bench/everyday.py [--url URL] [--data PATH] [--out PATH] [--failures N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchlib import (
    JSON,
    Api,
    fmt,
    machine_facts,
    percentile,
    print_machine,
    run_pool,
    wait_ready,
    write_json,
)

TOP_K = 10
LANGUAGES = ("en", "zh", "cross")
MODES = ("defaults", "floor_off")
DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "everyday.json"


@dataclass
class Item:
    id: str
    language: str
    category: str
    turns: list[JSON]
    question: str
    answer_turn: int | None
    superseded_turn: int | None
    filler_turns: list[int]


@dataclass
class Ranked:
    """One recall: per result, its source message ids, content and `scores.semantic`."""

    sources: list[list[str]] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    semantic: list[float] = field(default_factory=list)

    def rank_of(self, message_id: str, content: str = "") -> int | None:
        """1-based rank of the first result sourced from `message_id` or holding `content`."""
        needle = content.strip()
        for i, (src, text) in enumerate(zip(self.sources, self.contents, strict=True)):
            if message_id in src or (needle and needle in text):
                return i + 1
        return None


def load(path: Path) -> tuple[JSON, list[Item]]:
    doc: JSON = json.loads(path.read_text())
    items = [
        Item(
            it["id"],
            it["language"],
            it.get("category", "fact" if it["answer_turn"] is not None else "never"),
            list(it["turns"]),
            it["question"],
            it["answer_turn"],
            it.get("superseded_turn"),
            list(it.get("filler_turns", [])),
        )
        for it in doc["items"]
    ]
    return doc, items


def message_id(item: Item, turn: int) -> str:
    return f"{item.id}-t{turn}"


# --------------------------------------------------------------------------- the service


async def ingest(api: Api, items: list[Item], prefix: str, concurrency: int) -> JSON:
    """Each history as its own user and session, turns a minute apart two days ago."""
    start = time.monotonic()
    base = datetime.now(UTC) - timedelta(days=2)

    async def one(item: Item) -> int:
        messages = [
            {
                "id": message_id(item, i),
                "role": t["role"],
                "content": t["content"],
                "created_at": (base + timedelta(minutes=i)).isoformat(),
            }
            for i, t in enumerate(item.turns)
        ]
        data, _ = await api.ingest(f"{prefix}-{item.id}", f"{prefix}-{item.id}", messages, True)
        return 0 if data is None else int(data["accepted"])

    accepted = await run_pool(items, one, concurrency)
    return {"accepted": sum(accepted), "seconds": time.monotonic() - start}


async def recall(
    api: Api, items: list[Item], prefix: str, floor_off: bool, concurrency: int
) -> dict[str, Ranked]:
    async def one(item: Item) -> Ranked | None:
        body: JSON = {
            "user_id": f"{prefix}-{item.id}",
            "query": item.question,
            "top_k": TOP_K,
            "reinforce": False,
        }
        if floor_off:
            body["min_relevance"] = 0
        data, _ = await api.recall(body)
        if data is None:
            return None
        r = Ranked()
        for res in data["results"]:
            r.sources.append([s["message_id"] for s in res["sources"]])
            r.contents.append(res["content"])
            r.semantic.append(float(res["scores"]["semantic"]))
        return r

    answers = await run_pool(items, one, concurrency)
    return {it.id: r for it, r in zip(items, answers, strict=True) if r is not None}


# --------------------------------------------------------------------------- metrics


def answer_rank(item: Item, r: Ranked) -> int | None:
    assert item.answer_turn is not None
    return r.rank_of(message_id(item, item.answer_turn), item.turns[item.answer_turn]["content"])


def fillers_above(item: Item, r: Ranked) -> int:
    rank = answer_rank(item, r)
    n = 0
    for f in item.filler_turns:
        fr = r.rank_of(message_id(item, f))  # by id alone: "好的" is inside many a sentence
        if fr is not None and (rank is None or fr < rank):
            n += 1
    return n


def share(n: int, d: int) -> float | None:
    return n / d if d else None


def evaluate(items: list[Item], ranked: dict[str, dict[str, Ranked]]) -> JSON:
    answerable = [it for it in items if it.answer_turn is not None]
    never = [it for it in items if it.answer_turn is None]
    out: JSON = {}
    groups = [(lang, [it for it in answerable if it.language == lang]) for lang in LANGUAGES]
    for name, group in [*groups, ("all", answerable)]:
        row: JSON = {"n": len(group)}
        for mode in MODES:
            got = [it for it in group if it.id in ranked[mode]]
            ranks = [answer_rank(it, ranked[mode][it.id]) for it in got]
            row[mode] = {
                "hit@1": share(sum(1 for x in ranks if x == 1), len(got)),
                "hit@3": share(sum(1 for x in ranks if x is not None and x <= 3), len(got)),
                "empty": share(sum(1 for it in got if not ranked[mode][it.id].contents), len(got)),
            }
        both = [it for it in group if it.id in ranked["defaults"] and it.id in ranked["floor_off"]]
        hidden = [
            it
            for it in both
            if answer_rank(it, ranked["floor_off"][it.id]) == 1
            and answer_rank(it, ranked["defaults"][it.id]) != 1
        ]
        row["hidden_by_floor"] = share(len(hidden), len(both))
        off = [it for it in group if it.id in ranked["floor_off"] and it.filler_turns]
        counts = [fillers_above(it, ranked["floor_off"][it.id]) for it in off]
        row["fillers_above_answer"] = {
            "questions_with_fillers": len(off),
            "total": sum(counts),
            "questions_with_one_or_more": sum(1 for c in counts if c),
        }
        sem = [
            ranked["floor_off"][it.id].semantic[x - 1]
            for it in group
            if it.id in ranked["floor_off"] and (x := answer_rank(it, ranked["floor_off"][it.id]))
        ]
        row["answer_semantic"] = {
            "p10": percentile(sem, 10),
            "p50": percentile(sem, 50),
            "p90": percentile(sem, 90),
        }
        out[name] = row
    upd = [
        it for it in answerable if it.superseded_turn is not None and it.id in ranked["floor_off"]
    ]
    newer = 0
    for it in upd:
        r = ranked["floor_off"][it.id]
        new = answer_rank(it, r)
        old_turn = it.superseded_turn
        assert old_turn is not None
        old = r.rank_of(message_id(it, old_turn), it.turns[old_turn]["content"])
        newer += new is not None and (old is None or new < old)
    out["updated"] = {"n": len(upd), "newer_above_older": share(newer, len(upd))}
    nm: JSON = {"n": len(never)}
    for mode in MODES:
        got = [it for it in never if it.id in ranked[mode]]
        tops = [max(ranked[mode][it.id].semantic) for it in got if ranked[mode][it.id].semantic]
        nm[mode] = {
            "empty": share(sum(1 for it in got if not ranked[mode][it.id].contents), len(got)),
            "top_semantic_p50": percentile(tops, 50),
            "top_semantic_p90": percentile(tops, 90),
        }
    out["never_mentioned"] = nm
    return out


def failures(items: list[Item], ranked: dict[str, dict[str, Ranked]], n: int) -> list[JSON]:
    """Answerable questions whose answer is not first with the defaults, spread over the
    languages, and never-mentioned questions the defaults answered anyway."""
    out: list[JSON] = []
    for lang in LANGUAGES:
        picked = 0
        for it in items:
            if it.language != lang or it.answer_turn is None or it.id not in ranked["defaults"]:
                continue
            r = ranked["defaults"][it.id]
            if answer_rank(it, r) == 1:
                continue
            if picked >= n:  # `--failures 0` prints none (a held-out set stays unread)
                break
            off = ranked["floor_off"].get(it.id)
            out.append(
                {
                    "id": it.id,
                    "question": it.question,
                    "answer": it.turns[it.answer_turn]["content"],
                    "top": (r.contents[0], r.semantic[0]) if r.contents else None,
                    "rank_floor_off": answer_rank(it, off) if off else None,
                    "top_floor_off": (off.contents[0], off.semantic[0])
                    if off and off.contents
                    else None,
                }
            )
            picked += 1
    picked = 0
    for it in items:
        got = ranked["defaults"].get(it.id)
        if it.answer_turn is None and got is not None and got.contents and picked < n:
            out.append(
                {
                    "id": it.id,
                    "question": it.question,
                    "answer": None,
                    "top": (got.contents[0], got.semantic[0]),
                }
            )
            picked += 1
    return out


def print_report(m: JSON) -> None:
    print(
        f"{'language':10s}{'n':>5s}  {'defaults hit@1/hit@3 (empty)':>30s}"
        f"  {'floor off hit@1/hit@3':>22s}  {'hidden':>7s}  fillers above (qs)  answer sem p10/p50"
    )
    for name in (*LANGUAGES, "all"):
        row = m[name]
        d, o = row["defaults"], row["floor_off"]
        fa = row["fillers_above_answer"]
        defaults = f"{fmt(d['hit@1'], 3)} / {fmt(d['hit@3'], 3)} ({fmt(d['empty'], 2)})"
        off = f"{fmt(o['hit@1'], 3)} / {fmt(o['hit@3'], 3)}"
        fillers = (
            f"{fa['total']} ({fa['questions_with_one_or_more']}/{fa['questions_with_fillers']})"
        )
        sem = row["answer_semantic"]
        print(
            f"{name:10s}{row['n']:>5d}  {defaults:>30s}  {off:>22s}"
            f"  {fmt(row['hidden_by_floor'], 3):>7s}  {fillers:>18s}"
            f"  {fmt(sem['p10'], 3)}/{fmt(sem['p50'], 3)}"
        )
    u = m["updated"]
    newer = fmt(u["newer_above_older"], 3)
    print(f"updated facts, newer above older (floor off): {newer} of {u['n']}")
    nm = m["never_mentioned"]
    print(
        f"never mentioned ({nm['n']}): empty with defaults {fmt(nm['defaults']['empty'], 3)}, "
        f"top semantic p50/p90 {fmt(nm['floor_off']['top_semantic_p50'], 3)}"
        f"/{fmt(nm['floor_off']['top_semantic_p90'], 3)}"
    )


def print_failures(fails: list[JSON]) -> None:
    print("\nsome failures (defaults):")
    for f in fails:
        top = f["top"]
        top_text = f"{top[0]!r} ({top[1]:.3f})" if top else "(nothing)"
        if f["answer"] is None:
            print(f"  [{f['id']}] {f['question']!r} (never mentioned) -> {top_text}")
            continue
        off = f["top_floor_off"]
        print(
            f"  [{f['id']}] {f['question']!r}\n      answer {f['answer']!r}\n      got {top_text}"
        )
        print(
            f"      floor off: answer at rank {f['rank_floor_off']}, top "
            + (f"{off[0]!r} ({off[1]:.3f})" if off else "(nothing)")
        )


async def main_async(args: argparse.Namespace) -> int:
    facts = machine_facts()
    print_machine(facts)
    doc, items = load(args.data)
    n_ans = sum(1 for it in items if it.answer_turn is not None)
    print(
        f"everyday set: {len(items)} histories, {sum(len(it.turns) for it in items)} turns, "
        f"{n_ans} answerable, {len(items) - n_ans} never mentioned"
    )
    prefix = f"everyday-{uuid.uuid4().hex[:8]}"
    async with Api(args.url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 60):
            print(f"server at {args.url} is not ready", file=sys.stderr)
            return 2
        ing = await ingest(api, items, prefix, args.concurrency)
        print(f"ingest (wait=true): {ing['accepted']} accepted in {ing['seconds']:.1f} s")
        ranked: dict[str, dict[str, Ranked]] = {}
        for mode in MODES:
            start = time.monotonic()
            ranked[mode] = await recall(api, items, prefix, mode == "floor_off", args.concurrency)
            took = time.monotonic() - start
            print(f"recall {mode}: {len(ranked[mode])}/{len(items)} in {took:.1f} s")
        errors = api.errors
    metrics = evaluate(items, ranked)
    print()
    print_report(metrics)
    fails = failures(items, ranked, args.failures)
    print_failures(fails)
    print()
    errors.print()
    per_item = [
        {
            "id": it.id,
            "language": it.language,
            "category": it.category,
            "question": it.question,
            **{
                mode: {
                    "answer_rank": answer_rank(it, ranked[mode][it.id])
                    if it.answer_turn is not None
                    else None,
                    "top": list(
                        zip(
                            ranked[mode][it.id].contents[:3],
                            ranked[mode][it.id].semantic[:3],
                            strict=True,
                        )
                    ),
                }
                if it.id in ranked[mode]
                else None
                for mode in MODES
            },
        }
        for it in items
    ]
    write_json(
        Path(args.out),
        {
            "benchmark": "everyday",
            "data": doc.get("name"),
            "machine": facts,
            "args": {k: v for k, v in vars(args).items() if k != "api_key"},
            "ingest": ing,
            "metrics": metrics,
            "failures": fails,
            "errors": errors.as_json(),
            "items": per_item,
        },
    )
    return 0 if not errors.total else 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Strata base URL")
    p.add_argument("--out", type=Path, default=Path("bench/results/everyday.json"))
    p.add_argument("--failures", type=int, default=3, help="failures printed per language")
    p.add_argument("--concurrency", type=int, default=2, help="requests in flight")
    p.add_argument("--request-timeout", type=float, default=120)
    p.add_argument("--api-key", default=os.environ.get("STRATA_API_KEY"))
    args = p.parse_args(argv)
    if not args.data.is_file():
        p.error(f"--data {args.data} is not a file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
