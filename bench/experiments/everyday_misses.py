"""Where the everyday answers that do not come first sit (issue 40).

Reads an `everyday.py --out` file and the set it ran on, and sorts each answerable question
whose answer is not first with the defaults by where the first result sits in its history:
`opener` (a turn of the user's before the answer, also the user's: the turn that brought the
topic up), `after` (a turn after the answer, mostly the assistant's reply), `before` (an
assistant's turn before the answer), `other` (not in the history). Prints each with what the
question asks (`ranking.asks_for`, `asks_amount`, `asks_name`, `asks_who`, `asks_which`),
then the counts. Only for sets whose misses may be read: not the held-out ones.

    python bench/experiments/everyday_misses.py --result OUT.json --data bench/data/everyday9.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core import ranking


def where(turns: list[dict[str, Any]], top: int, answer: int) -> str:
    if top < 0:
        return "other"
    if top > answer:
        return "after"
    if turns[top]["role"] == "user" and turns[answer]["role"] == "user":
        return "opener"
    return "before"


def asks(question: str) -> str:
    return (
        f"kind={ranking.asks_for(question)} amount={int(ranking.asks_amount(question))} "
        f"name={int(ranking.asks_name(question))} who={int(ranking.asks_who(question))} "
        f"which={int(ranking.asks_which(question))}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--result", required=True, type=Path, help="everyday.py --out file")
    p.add_argument("--data", required=True, type=Path, help="the set it ran on")
    args = p.parse_args(argv)
    items = {it["id"]: it for it in json.loads(args.data.read_text())["items"]}
    counts: Counter[tuple[str, str]] = Counter()
    for r in json.loads(args.result.read_text())["items"]:
        if r["category"] == "never" or r["defaults"]["answer_rank"] == 1:
            continue
        item = items[r["id"]]
        turns = item["turns"]
        texts = [f"{t['role']}: {t['content']}" for t in turns]
        answer = item["answer_turn"]
        answer = answer if isinstance(answer, int) else answer[0]
        first = r["defaults"]["top"][0][0] if r["defaults"]["top"] else ""
        top = texts.index(first) if first in texts else -1
        place = where(turns, top, answer)
        counts[(r["category"], place)] += 1
        print(f"{r['id']} [{r['category']}/{place}] {top}->{answer} {asks(r['question'])}")
        print(f"    Q: {r['question']}\n    A: {texts[answer][:110]}\n    1: {first[:110]}")
    for (category, place), n in counts.most_common():
        print(f"{category:8s} {place:7s} {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
