"""What recall's first-person rules cost (issue 40): LoCoMo's questions about its first
speaker asked as the user would ask them ("What is Caroline's identity?" → "What is my
identity?"), one at a time, on a server that already holds LoCoMo (`bench/locomo.py` ran
against it). For a question about the user, `UserWordsFirst` runs, and for one about how
things stand the index also compares every candidate that may restate an older one
(`NewerFactsFirst`); LoCoMo's own questions name the speaker and pay neither.

    python bench/experiments/first_person_cost.py --data PATH --url URL [--rounds 2]

Printed: the server's `took_ms` and the client's ms, p50 / p95, and how many of the
questions ask about now. Run it against two checkouts on the same data dir, alternated.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import Api, machine_facts, percentile, print_machine, wait_ready
from locomo import load_conversations

from app.core import ranking


def first_person(question: str, name: str) -> str | None:
    """The question with the speaker's name as "I"/"my", or None if it does not name them."""
    if re.search(rf"\b{re.escape(name)}\b", question) is None:
        return None
    out = re.sub(rf"\b{re.escape(name)}'s\b", "my", question)
    return re.sub(rf"\b{re.escape(name)}\b", "I", out)


async def main_async(args: argparse.Namespace) -> None:
    conversations = load_conversations(Path(args.data), args.conversations)
    asked: list[tuple[str, str]] = []
    for c in conversations:
        user_turn = next(m for s in c.sessions for m in s.messages if m["role"] == "user")
        name = user_turn["metadata"]["name"]
        for question in c.questions:
            mine = first_person(question.question, name)
            if mine is not None:
                asked.append((c.user_id, mine))
    now = sum(ranking.asks_about_now(q) and ranking.asks_about_user(q) for _, q in asked)
    print(f"{len(asked)} questions about the first speaker, {now} about how things stand")
    async with Api(args.url, None, 60.0) as api:
        if not await wait_ready(api, 60):
            raise SystemExit(f"{args.url} is not ready")
        for r in range(args.rounds):
            took: list[float] = []
            client: list[float] = []
            for user, q in asked:
                body = {"user_id": user, "query": q, "top_k": args.top_k, "reinforce": False}
                data, ms = await api.recall(body)
                if data is None:
                    raise SystemExit(f"recall failed: {api.errors}")
                took.append(float(data["took_ms"]))
                client.append(ms)
            print(
                f"round {r + 1}: took_ms p50 {percentile(took, 50):.1f} p95 "
                f"{percentile(took, 95):.1f}; client ms p50 {percentile(client, 50):.1f} p95 "
                f"{percentile(client, 95):.1f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="locomo10.json")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print_machine(machine_facts())
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
