"""Rank rules simulated on the service's own LoCoMo top-50 lists, without a server.

    python bench/experiments/top50_rules.py --results bench/results/locomo.json \
        --data path/to/locomo10.json

`--results` is what `bench/locomo.py` wrote (each question's `ranked` lists of source
`dia_id`s, best first). Each rule re-orders those lists and R@10 (LoCoMo's turn-level
evidence recall) is printed over all questions and per category:

- `sessions k`: at most k results per session in the top, the rest after them (the
  multi-hop questions alone, picked by their labelled category: an upper bound for any
  detector of "list" questions);
- `speaker n`: a result not said by the one participant the question names moves down n
  places (adversarial questions name the wrong participant on purpose);
- `neighbours`: a result within w turns of one of the top 10 moves up p places, never
  above it (bench/README.md, "Neighbours in the top 10").

Nothing here looks at answers; the rules read the question text, the turns' speakers and
positions. A rule that gains here is tuned on LoCoMo alone until the bilingual set and
LongMemEval say otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

Ranked = list[list[str]]
Rule = Callable[[dict[str, Any]], Ranked]
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def position(dia_id: str) -> tuple[str, int]:
    session, _, turn = dia_id.partition(":")
    return session, int(turn) if turn.isdigit() else -1


def recall_at(ranked: Ranked, evidence: list[str], k: int = 10) -> float:
    found = {d for ids in ranked[:k] for d in ids}
    return len(found & set(evidence)) / len(evidence)


def reorder(ranked: Ranked, keys: list[float]) -> Ranked:
    return [ranked[i] for i in sorted(range(len(ranked)), key=lambda i: (keys[i], i))]


def per_session(ranked: Ranked, k: int) -> Ranked:
    seen: dict[str, int] = defaultdict(int)
    first: Ranked = []
    rest: Ranked = []
    for ids in ranked:
        session = position(ids[0])[0] if ids else "?"
        (first if seen[session] < k else rest).append(ids)
        seen[session] += 1
    return first + rest


def neighbours(ranked: Ranked, within: int, places: int, anchors: int = 10) -> Ranked:
    spots = [position(ids[0]) if ids else None for ids in ranked]
    keys: list[float] = []
    for i, here in enumerate(spots):
        key = float(i)
        for j in range(min(i, anchors)):
            there = spots[j]
            if here and there and here[0] == there[0] and 0 < abs(here[1] - there[1]) <= within:
                key = max(j + 0.5, i - places)
                break
        keys.append(key)
    return reorder(ranked, keys)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--results", type=Path, required=True, help="bench/locomo.py's JSON")
    p.add_argument("--data", type=Path, required=True, help="locomo10.json")
    args = p.parse_args()
    questions: list[dict[str, Any]] = json.loads(args.results.read_text())["questions"]
    if not questions or "ranked" not in questions[0]:
        p.error("--results has no ranked lists: run bench/locomo.py from this checkout")
    conversations = json.loads(args.data.read_text())
    speaker: dict[tuple[int, str], str] = {}
    pair: dict[int, tuple[str, str]] = {}
    text: dict[tuple[int, int], str] = {}
    for ci, conv in enumerate(conversations):
        c = conv["conversation"]
        pair[ci] = (c["speaker_a"], c["speaker_b"])
        for key, turns in c.items():
            if key.startswith("session_") and isinstance(turns, list):
                for t in turns:
                    speaker[(ci, t["dia_id"])] = t["speaker"]
        for qi, qa in enumerate(conv["qa"]):
            text[(ci, qi)] = qa["question"]

    def named(q: dict[str, Any]) -> str | None:
        words = text.get((q["conv"], q["qa"]), "")
        hits = [n for n in pair[q["conv"]] if re.search(rf"\b{re.escape(n.split()[0])}\b", words)]
        return hits[0] if len(hits) == 1 else None

    def by_speaker(q: dict[str, Any], places: int) -> Ranked:
        who = named(q)
        if who is None:
            return list(q["ranked"])
        keys = [
            i + (places if ids and speaker.get((q["conv"], ids[0])) != who else 0)
            for i, ids in enumerate(q["ranked"])
        ]
        return reorder(q["ranked"], [float(k) for k in keys])

    def sessions_rule(k: int) -> Rule:
        return lambda q: per_session(q["ranked"], k) if q["category"] == 1 else q["ranked"]

    def speaker_rule(n: int) -> Rule:
        return lambda q: by_speaker(q, n)

    def neighbour_rule(w: int, up: int) -> Rule:
        return lambda q: neighbours(q["ranked"], w, up)

    rules: list[tuple[str, Rule]] = [("none", lambda q: q["ranked"])]
    rules += [(f"sessions {k} (multi-hop only)", sessions_rule(k)) for k in (1, 2, 3)]
    rules += [(f"speaker {n}", speaker_rule(n)) for n in (2, 5, 8, 50)]
    rules += [
        (f"neighbours within {w}, up {up}", neighbour_rule(w, up))
        for w, up in ((1, 3), (2, 3), (2, 5))
    ]
    print(f"{'rule':34s}  R@10   " + "  ".join(f"{c[:11]:>11s}" for c in CATEGORIES.values()))
    for name, rule in rules:
        per: dict[int, list[float]] = defaultdict(list)
        for q in questions:
            per[q["category"]].append(recall_at(rule(q), q["evidence"]))
        scores = [v for vs in per.values() for v in vs]
        cells = "  ".join(
            f"{sum(per[c]) / len(per[c]):11.3f}" if per[c] else f"{'-':>11s}" for c in CATEGORIES
        )
        print(f"{name:34s} {sum(scores) / len(scores):.4f} {cells}")


if __name__ == "__main__":
    main()
