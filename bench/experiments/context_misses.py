"""Where the LoCoMo evidence that one context call misses sits (issue 40).

Every question is asked of the context at one budget (as `bench/locomo.py
--context-budgets` asks it) and of recall as the context asks it (the last session,
`as_of`, `top_k` 200, no floor). Each evidence turn is then: in the context's text or not;
its rank in that recall (None: not in the top 200); its relevance there; whether it is the
turn just before or after a memory the context shows (same session); its category.

    python bench/experiments/context_misses.py --data PATH --url URL [--budget 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import JSON, Api, run_pool, write_json
from locomo import CATEGORIES, Question, _flat, load_conversations

SCORE_TERMS = ("semantic", "recency", "importance")


def turn_no(dia_id: str) -> tuple[int, int]:
    s, t = dia_id[1:].split(":")
    return int(s), int(t)


async def main_async(args: argparse.Namespace) -> int:
    conversations = load_conversations(Path(args.data), args.conversations)
    by_index = {c.index: c for c in conversations}
    turns = {
        (c.index, m["id"]): _flat(m["content"])
        for c in conversations
        for s in c.sessions
        for m in s.messages
    }
    questions = [q for c in conversations for q in c.questions]
    rows: list[JSON] = []
    lists: list[JSON] = []

    async with Api(args.url, None, 120) as api:

        async def one(q: Question) -> None:
            conv = by_index[q.conv]
            sid = conv.last_session.session_id
            ctx, _ = await api.context(
                sid,
                {
                    "user_id": conv.user_id,
                    "query": q.question,
                    "token_budget": args.budget,
                    "as_of": conv.as_of.isoformat(),
                },
            )
            rec, _ = await api.recall(
                {
                    "user_id": conv.user_id,
                    "query": q.question,
                    "top_k": 200,
                    "as_of": conv.as_of.isoformat(),
                    "session_id": sid,
                    "min_relevance": 0.0,
                    "reinforce": False,
                }
            )
            if ctx is None or rec is None:
                return
            text = _flat(ctx["text"])
            shown = {s["message_id"] for m in ctx["sections"]["memories"] for s in m["sources"]} | {
                m.get("id") or "" for m in ctx["sections"]["recent_messages"]
            }
            shown_turns = {turn_no(d) for d in shown if d.startswith("D") and ":" in d}
            rank: dict[str, tuple[int | None, float | None]] = {}
            for r, res in enumerate(rec["results"], 1):
                for s in res["sources"]:
                    rank.setdefault(s["message_id"], (r, res["scores"]["semantic"]))
            n_mem = len(ctx["sections"]["memories"])
            lists.append(
                {
                    "conv": q.conv,
                    "q": q.index,
                    "cat": CATEGORIES[q.category],
                    "evidence": q.evidence,
                    "ranked": [[s["message_id"] for s in res["sources"]] for res in rec["results"]],
                    "semantic": [res["scores"]["semantic"] for res in rec["results"]],
                    # Each result's score terms, for orderings simulated offline.
                    "scores": [
                        [res["score"], *(res["scores"][k] for k in SCORE_TERMS)]
                        for res in rec["results"]
                    ],
                    "memories": [
                        [s["message_id"] for s in m["sources"]] for m in ctx["sections"]["memories"]
                    ],
                    "recent": [m.get("id") for m in ctx["sections"]["recent_messages"]],
                    "found": [e for e in q.evidence if turns[(q.conv, e)] in text],
                }
            )
            for e in q.evidence:
                sess, t = turn_no(e)
                at, sem = rank.get(e, (None, None))
                rows.append(
                    {
                        "conv": q.conv,
                        "q": q.index,
                        "cat": CATEGORIES[q.category],
                        "e": e,
                        "in_text": turns[(q.conv, e)] in text,
                        "rank": at,
                        "semantic": sem,
                        "memories": n_mem,
                        "neighbour": (sess, t - 1) in shown_turns or (sess, t + 1) in shown_turns,
                        "near2": any((sess, t + d) in shown_turns for d in (-2, -1, 1, 2)),
                        "rewritten": rec.get("rewritten_query"),
                    }
                )

        await run_pool(questions, one, args.concurrency)

    write_json(Path(args.out), {"rows": rows, "lists": lists})
    missed = [r for r in rows if not r["in_text"]]
    print(f"evidence {len(rows)}, in text {1 - len(missed) / len(rows):.3f}")

    def bucket(r: JSON) -> str:
        k = r["rank"]
        if k is None:
            return ">200"
        for hi in (10, 30, 50, 91, 133, 200):
            if k <= hi:
                return f"<={hi}"
        return "?"

    print("missed by recall rank:", sorted(Counter(bucket(r) for r in missed).items()))
    print("missed by category:", sorted(Counter(r["cat"] for r in missed).items()))
    print("all by category:", sorted(Counter(r["cat"] for r in rows).items()))
    print("missed, neighbour of a shown memory:", sum(r["neighbour"] for r in missed))
    print("missed, within 2 turns of a shown memory:", sum(r["near2"] for r in missed))
    deep = [r for r in missed if r["rank"] is not None and r["rank"] > 30]
    print(
        "missed past rank 30 with semantic < 0.1:",
        sum(1 for r in deep if (r["semantic"] or 0) < 0.1),
        "of",
        len(deep),
    )
    inside = [r for r in missed if r["rank"] is not None and r["rank"] <= r["memories"]]
    print("missed though ranked within the memories shown count:", len(inside))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--budget", type=int, default=4000)
    p.add_argument("--conversations", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--out", default="bench/results/context_misses.json")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
