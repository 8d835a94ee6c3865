"""Short conversations as people have them (issue 40): paraphrased questions, updated facts,
follow-ups asked in a new conversation, follow-ups about the conversation they are asked
in, and questions about what was never said, in English, Chinese and across the two.

Each case stores its sessions (dated `days_ago` before now, oldest first) for a user of its
own, then asks `POST /v1/recall` (`top_k` 10, no reinforcement), with `session_id` when the
case is asked in one of its sessions. A case's answer is found at the first result with
that turn among its `sources` (the turn itself, or a fact promoted from it).

    python bench/conversations.py --url URL [--data bench/data/conversations_fresh.json]
        [--prefix P] [--min-relevance X] [--out PATH]

Printed per kind and language: hit@1 / hit@3; for updates, how often the newer statement
ranks above the older one it replaces (`older`); for two similar statements both still
true (`both_true`), how often the one asked about ranks above the other; for
never-mentioned questions, how often nothing comes back.
Four sets, each written by someone who saw neither the code's rules nor the other sets:
`conversations_dev.json` (80; its failures were read while changing the code),
`conversations_heldout.json` (71; measured, then its failures read once),
`conversations_fresh.json` (60; measured once for bench/README.md) and
`conversations_updates.json` (50 updates and similar statements both still true) and
`conversations_updates2.json` (60 of the same kinds, written by someone who saw neither
the code nor the other sets while the rules of bench/README.md "Updates said without a
change word" were made, and measured once, after them), and `conversations_updates3.json`
(60 more, written the same way and measured once at the end). Use a
new `--prefix` for each run on the same data dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchlib import JSON, Api, machine_facts, print_machine, wait_ready, write_json

DATA = Path(__file__).resolve().parent / "data"
KINDS = ("paraphrase", "update", "both_true", "followup", "same_session", "never_mentioned")
LANGS = ("en", "zh", "cross", "all")


def rank_of(results: list[JSON], session_id: str, message_id: str) -> int | None:
    for n, r in enumerate(results, 1):
        for s in r.get("sources") or []:
            if s.get("session_id") == session_id and s.get("message_id") == message_id:
                return n
    return None


async def run(args: argparse.Namespace, cases: list[JSON]) -> list[JSON]:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    owner = {c["id"]: c for c in cases}
    rows: list[JSON] = []
    async with Api(args.url, args.api_key, args.timeout) as api:
        if not await wait_ready(api, 60):
            raise SystemExit(f"{args.url} is not ready")

        def user_of(case: JSON) -> str:
            # The set's name too: two sets share case ids, and their users must not meet.
            return f"{args.prefix}-{args.data.stem}-{case.get('asks_of') or case['id']}"

        def session(case: JSON, sid: str) -> str:
            return f"{user_of(case)}-{sid}"

        for case in cases:  # the histories first: a never-mentioned question asks another's
            sessions = sorted(case["sessions"], key=lambda s: (-s["days_ago"], s["hour"]))
            for s in sessions:
                day = (now - timedelta(days=s["days_ago"])).replace(hour=s["hour"])
                day = min(day, now - timedelta(hours=1))
                messages = [
                    {**m, "created_at": (day + timedelta(minutes=i)).isoformat()}
                    for i, m in enumerate(s["messages"])
                ]
                stored, _ = await api.ingest(session(case, s["id"]), user_of(case), messages, True)
                if stored is None:
                    raise SystemExit(f"ingest failed for {case['id']}: {api.errors}")
        for case in cases:
            asked = owner[case["asks_of"]] if case.get("asks_of") else case
            body: dict[str, Any] = {
                "user_id": user_of(case),
                "query": case["query"],
                "top_k": 10,
                "reinforce": False,
            }
            if args.min_relevance is not None:
                body["min_relevance"] = args.min_relevance
            if case.get("ask_session"):
                body["session_id"] = session(asked, case["ask_session"])
            data, _ = await api.recall(body)
            if data is None:
                raise SystemExit(f"recall failed for {case['id']}")
            results = data["results"]
            row: JSON = {
                "id": case["id"],
                "kind": case["kind"],
                "lang": case["lang"],
                "query": case["query"],
                "rewritten_query": data.get("rewritten_query"),
                "returned": len(results),
                "top": [
                    {"content": r["content"], "semantic": r["scores"]["semantic"]}
                    for r in results[:3]
                ],
            }
            if case.get("expect"):
                want = case["expect"]
                row["rank"] = rank_of(
                    results, session(case, want["session_id"]), want["message_id"]
                )
            if case.get("older"):
                old = case["older"]
                row["rank_older"] = rank_of(
                    results, session(case, old["session_id"]), old["message_id"]
                )
                row["newer_above_older"] = row["rank"] is not None and (
                    row["rank_older"] is None or row["rank"] < row["rank_older"]
                )
            rows.append(row)
    return rows


def summary(rows: list[JSON]) -> list[str]:
    groups: dict[tuple[str, str], list[JSON]] = defaultdict(list)
    for r in rows:
        groups[(r["kind"], r["lang"])].append(r)
        groups[(r["kind"], "all")].append(r)
    lines = [f"{'kind':<16}{'lang':<7}{'n':>4}  hit@1  hit@3  newer>older  empty"]
    for kind in KINDS:
        for lang in LANGS:
            g = groups.get((kind, lang))
            if not g:
                continue
            n = len(g)
            if kind == "never_mentioned":
                empty = sum(r["returned"] == 0 for r in g) / n
                lines.append(f"{kind:<16}{lang:<7}{n:>4}  {'':>5}  {'':>5}  {'':>11}  {empty:.2f}")
                continue

            def hit(k: int, g: list[JSON] = g) -> float:
                return float(sum(r["rank"] is not None and r["rank"] <= k for r in g)) / len(g)

            newer = (
                f"{sum(r['newer_above_older'] for r in g) / n:>11.2f}"
                if kind in ("update", "both_true")
                else " " * 11
            )
            lines.append(f"{kind:<16}{lang:<7}{n:>4}  {hit(1):.2f}   {hit(3):.2f}  {newer}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--data", type=Path, default=DATA / "conversations_fresh.json")
    parser.add_argument("--prefix", default="conv" + time.strftime("%H%M%S"))
    parser.add_argument("--min-relevance", type=float, default=None, help="default: the server's")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cases = json.loads(args.data.read_text(encoding="utf-8"))
    print_machine(machine_facts())
    rows = asyncio.run(run(args, cases))
    lines = summary(rows)
    print(f"{args.data.name}: {len(rows)} cases, min_relevance {args.min_relevance or 'default'}")
    print("\n".join(lines))
    misses = [f"{r['id']}({r['rank']})" for r in rows if "rank" in r and r["rank"] != 1]
    print("not first:", ", ".join(misses) or "none", file=sys.stderr)
    if args.out:
        write_json(args.out, {"machine": machine_facts(), "data": str(args.data), "rows": rows})


if __name__ == "__main__":
    main()
