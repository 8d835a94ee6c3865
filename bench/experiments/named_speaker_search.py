"""Does a search limited to the speaker a question names find the evidence recall's top 200
misses (issue 40)? In process, on a stopped server's data dir (embedded mode).

For every LoCoMo question that names a speaker (`names_speaker`), recall as the context asks
it (`top_k` 200, `as_of`, the last session), and two searches of every memory (`top_k`
1000, rewrite off) kept to the named speakers' memories: by the question, and by the
question without the names (`without_names`). Then, for the evidence turns that
`context_misses.py`'s output says the context missed and recall's top 200 does not hold:
who said them, and their rank in each speaker-limited list.

    python bench/experiments/context_misses.py --data PATH --url URL --budget 4000
    (stop the server)
    STRATA_DATA_DIR=DIR python bench/experiments/named_speaker_search.py --data PATH
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from locomo import load_conversations

from app.core.ranking import names_speaker
from app.datalock import DataDirLock
from app.services.context import memory_speaker, without_names
from app.services.search import Found, SearchSpec
from app.settings import Settings
from app.wiring import open_container


def theirs(found: Found, named: list[str]) -> list[list[str]]:
    """The turns of the named speakers' memories, in the search's order."""
    return [[s.message_id for s in r.sources] for r in found.results if memory_speaker(r) in named]


def rank_of(ranked: list[list[str]], turn: str) -> int | None:
    return next((n for n, ids in enumerate(ranked, 1) if turn in ids), None)


def bucket(rank: int | None) -> str:
    if rank is None:
        return "none"
    return next(f"<={hi}" for hi in (10, 20, 40, 85, 133, 200, 400, 10**6) if rank <= hi)


async def main_async(args: argparse.Namespace) -> int:
    settings = Settings()
    conversations = load_conversations(Path(args.data), args.conversations)
    said_by = {
        (c.index, m["id"]): m["metadata"]["name"]
        for c in conversations
        for s in c.sessions
        for m in s.messages
    }
    rows = args.rows
    outside = [r for r in rows if not r["in_text"] and r["rank"] is None]
    lists: dict[tuple[int, int], dict[str, list[list[str]]]] = {}
    named_of: dict[tuple[int, int], list[str]] = {}
    async with DataDirLock(settings, "named_speaker_search"), open_container(settings) as c:
        recall = c.services.recall
        for conv in conversations:
            speakers = {said_by[(conv.index, m["id"])] for s in conv.sessions for m in s.messages}
            for q in conv.questions:
                named = sorted(s for s in speakers if names_speaker(q.question, s))
                named_of[(q.conv, q.index)] = named
                if not named:
                    continue

                spec = SearchSpec(
                    tenant_id=settings.default_tenant,
                    user_id=conv.user_id,
                    query=q.question,
                    top_k=1000,
                    as_of=conv.as_of,
                    session_id=conv.last_session.session_id,
                    rewrite="off",
                )
                unnamed = replace(spec, query=without_names(q.question, named))
                lists[(q.conv, q.index)] = {
                    "question": theirs(await recall.search(spec), named),
                    "question without the names": theirs(await recall.search(unnamed), named),
                }
    print(f"evidence missed and outside recall's top 200: {len(outside)}")
    who: Counter[str] = Counter()
    ranks: dict[str, Counter[str]] = {
        "question": Counter(),
        "question without the names": Counter(),
    }
    for r in outside:
        named = named_of[(r["conv"], r["q"])]
        if said_by[(r["conv"], r["e"])] not in named:
            who["not said by a speaker the question names"] += 1
            continue
        who["said by a speaker the question names"] += 1
        for key, ranked in lists[(r["conv"], r["q"])].items():
            ranks[key][bucket(rank_of(ranked, r["e"]))] += 1
    print(dict(who))
    for key, counts in ranks.items():
        print(f"rank among the named speakers' memories, searched by the {key}:", counts)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--conversations", type=int, default=10)
    p.add_argument("--misses", default="bench/results/context_misses.json")
    args = p.parse_args()
    args.rows = json.loads(Path(args.misses).read_text())["rows"]
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
