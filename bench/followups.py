"""Follow-up questions: how much query rewriting gives back of what a pronoun takes away.

Each follow-up in `bench/data/followups.json` is asked as the next user turn of its session
("那摔伤算吗？", "what about the second one?"), after the user's conversations are ingested
(`wait=true`). Every follow-up is recalled over all of the user's memories (`top_k=10`,
`reinforce=false`; recall's `session_id` no longer narrows, but the conditions below are
measured as they were, on the question each sends) under four conditions, in one run:

- `off`: the question as asked, `rewrite: off`;
- `auto`: the question rewritten by `POST /v1/rewrite` with its `session_id` (the heuristic
  when no LLM is configured), then recalled with `rewrite: off`: what a caller does for a
  follow-up whose answer may lie outside the session (context does the same internally);
- `history`: the session's last two turns prepended to the question, `rewrite: off`;
- `perfect`: the hand-written standalone question, `rewrite: off`.

Reported: evidence recall R@1/R@5/R@10 (the share of a question's evidence messages among
the results' `sources`), per condition and language.

Usage: python bench/followups.py [--url http://127.0.0.1:8000] [--data PATH] [--out PATH]
       [--min-relevance X]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from benchlib import JSON, Api, machine_facts, print_machine, wait_ready, write_json

KS = (1, 5, 10)
CONDITIONS = ("off", "auto", "history", "perfect")
HISTORY_TURNS = 2
DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "followups.json"


def _query(condition: str, followup: JSON, turns: list[JSON]) -> str:
    """The query one follow-up is asked as under one condition (`auto`: before its rewrite)."""
    if condition == "history":
        last = " ".join(m["content"] for m in turns[-HISTORY_TURNS:])
        return f"{last} {followup['question']}"
    if condition == "perfect":
        return str(followup["rewrite"])
    return str(followup["question"])


def _recall_at(results: list[JSON], evidence: list[str], k: int) -> float:
    found = {s["message_id"] for r in results[:k] for s in r["sources"]}
    return sum(e in found for e in evidence) / len(evidence)


async def _ingest(api: Api, user: JSON, prefix: str) -> dict[str, list[JSON]]:
    """Every session of the user, oldest first, one minute between messages; answers each
    session's messages by its id in the data set."""
    turns: dict[str, list[JSON]] = {}
    for session in sorted(user["sessions"], key=lambda s: s["created_at"]):
        start = datetime.fromisoformat(session["created_at"])
        messages = [
            {**m, "created_at": (start + timedelta(minutes=i)).isoformat()}
            for i, m in enumerate(session["messages"])
        ]
        data, _ = await api.ingest(
            f"{prefix}{session['session_id']}", f"{prefix}{user['user_id']}", messages, True
        )
        if data is None or data.get("indexed_seq", 0) < data["last_seq"]:
            raise SystemExit(f"ingest of {session['session_id']} failed or was not indexed")
        turns[session["session_id"]] = session["messages"]
    return turns


async def run(args: argparse.Namespace, data: JSON) -> JSON:
    prefix = f"fu-{uuid.uuid4().hex[:6]}-"  # a rerun on the same server starts afresh
    rows: list[JSON] = []
    async with Api(args.url, args.api_key, args.timeout) as api:
        if not await wait_ready(api, 60):
            raise SystemExit(f"{args.url} is not ready")
        start = time.monotonic()
        for user in data["users"]:
            turns = await _ingest(api, user, prefix)
            for followup in user["followups"]:
                row: JSON = {"id": followup["id"], "language": user["language"]}
                row["question"] = followup["question"]
                for condition in CONDITIONS:
                    query = _query(condition, followup, turns[followup["session_id"]])
                    if condition == "auto":
                        rewritten, _ = await api.request(
                            "POST",
                            "/v1/rewrite",
                            "rewrite",
                            {
                                "user_id": f"{prefix}{user['user_id']}",
                                "session_id": f"{prefix}{followup['session_id']}",
                                "query": query,
                            },
                        )
                        if rewritten is None:
                            raise SystemExit(f"rewrite failed for {followup['id']}")
                        query = rewritten["rewritten"]
                        row["rewritten"] = query if rewritten["changed"] else None
                    body = {
                        "user_id": f"{prefix}{user['user_id']}",
                        "query": query,
                        "top_k": 10,
                        "reinforce": False,
                        "rewrite": "off",
                    }
                    if args.min_relevance is not None:
                        body["min_relevance"] = args.min_relevance
                    answer, _ = await api.recall(body)
                    if answer is None:
                        raise SystemExit(f"recall failed for {followup['id']} ({condition})")
                    row[condition] = {
                        f"r@{k}": _recall_at(answer["results"], followup["evidence"], k) for k in KS
                    }
                rows.append(row)
        took = time.monotonic() - start
    return {"rows": rows, "seconds": took, "errors": api.errors.as_json()}


def table(rows: list[JSON]) -> JSON:
    """Mean R@k per condition, per language and overall."""
    out: JSON = {}
    for language in ("zh", "en", "all"):
        chosen = [r for r in rows if language in ("all", r["language"])]
        out[language] = {
            c: {f"r@{k}": sum(r[c][f"r@{k}"] for r in chosen) / len(chosen) for k in KS}
            for c in CONDITIONS
        }
        out[language]["n"] = len(chosen)
    return out


def report(summary: JSON, rows: list[JSON]) -> None:
    print("\nper follow-up (R@10 off / auto / history / perfect; auto's rewrite):")
    for r in rows:
        marks = " ".join(f"{r[c]['r@10']:.0f}" for c in CONDITIONS)
        print(f"  {r['id']}  {marks}  {r['question']}  ->  {r.get('rewritten') or '(unchanged)'}")
    print("\n| condition | language | n | R@1 | R@5 | R@10 |")
    print("|---|---|---|---|---|---|")
    for c in CONDITIONS:
        for language in ("zh", "en", "all"):
            cell = summary[language][c]
            n = summary[language]["n"]
            ks = " | ".join(f"{cell[f'r@{k}']:.3f}" for k in KS)
            print(f"| {c} | {language} | {n} | {ks} |")
    gap = summary["all"]["perfect"]["r@10"] - summary["all"]["auto"]["r@10"]
    print(f"\nauto is {gap:+.3f} R@10 below the perfect rewrite (target: within 0.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        help="sent with every recall (default: not sent, the service's default applies)",
    )
    args = parser.parse_args()
    facts = machine_facts()
    print_machine(facts)
    result = asyncio.run(run(args, json.loads(Path(args.data).read_text())))
    summary = table(result["rows"])
    report(summary, result["rows"])
    if result["errors"]["counts"]:
        print(f"errors: {result['errors']['counts']}", file=sys.stderr)
    if args.out:
        write_json(args.out, {"machine": facts, "summary": summary, **result})


if __name__ == "__main__":
    main()
