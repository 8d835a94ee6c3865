"""Offline extraction's precision and recall (issue 39; app/core/entities.py), per relation
kind and for entities, on the hand-labelled turns of bench/data/extraction.json, and its
cost per turn.

    .venv/bin/python bench/extraction.py [--data bench/data/extraction.json] [--misses]

Each turn is `dev` (the patterns were written against it) or `held_out` (written after the
patterns, never tuned on); the held-out precision is shown beside the whole set's.

A relation counts when subject, predicate and object all match (names compared by
`name_key`); an entity when its name does. Entities are the proper names extraction
yields (people, places, organisations, pets, unnamed-kind mentions), not a relation's
common-noun objects (diets, allergens, roles, preferences, languages). "mentions" counts
every name found; "entities (relations only)" only those a relation names, which is what is
written while the `mentions` kind is off. A kind meets the bar when its precision is at least
0.9 (`ON_BAR`) on all the turns, and on the held-out ones too when it made at least
`MIN_HELD_OUT` predictions there; "default" is what `app.core.entities.DEFAULT_KINDS` turns
on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.entities import DEFAULT_KINDS, KINDS, Extraction, extract, kind_of
from app.core.graph import name_key

ON_BAR = 0.9
COMMON_NOUN_KINDS = {"diet", "allergen", "food", "role", "preference", "language"}
HERE = Path(__file__).resolve().parent


def _names(found: Extraction) -> set[str]:
    return {name_key(m.name) for m in found.mentions if m.kind not in COMMON_NOUN_KINDS}


def _triples(found: Extraction) -> set[tuple[str, str, str]]:
    return {(name_key(f.subject), f.predicate, name_key(f.object)) for f in found.facts}


MIN_HELD_OUT = 10  # predictions a kind needs on the held-out turns to be judged there too
ENTITY_ROWS = ("mentions", "entities (relations only)")


@dataclass
class Score:
    tp: Counter[str] = field(default_factory=Counter)
    fp: Counter[str] = field(default_factory=Counter)
    fn: Counter[str] = field(default_factory=Counter)
    costs: list[float] = field(default_factory=list)
    silent: int = 0
    silent_ok: int = 0

    def precision(self, kind: str) -> float:
        n = self.tp[kind] + self.fp[kind]
        return self.tp[kind] / n if n else float("nan")

    def recall(self, kind: str) -> float:
        n = self.tp[kind] + self.fn[kind]
        return self.tp[kind] / n if n else float("nan")


def score(turns: list[dict[str, Any]], *, misses: bool = False) -> Score:
    out = Score()
    for turn in turns:
        t0 = time.perf_counter()
        found = extract(turn["text"])
        out.costs.append((time.perf_counter() - t0) * 1000)
        gold = {(name_key(s), p, name_key(o)) for s, p, o in turn["relations"]}
        got = _triples(found)
        for triple in got | gold:
            kind = kind_of(triple[0], triple[1])
            verdict = "tp" if triple in got and triple in gold else "fp" if triple in got else "fn"
            getattr(out, verdict)[kind] += 1
            if misses and verdict != "tp":
                print(f"{verdict.upper()} {kind:10} {triple}  <- {turn['text']}")
        gold_names = {name_key(n) for n in turn["entities"]}
        written = found.only(k for k in KINDS if k != "mentions")
        for label, names in (("mentions", _names(found)), (ENTITY_ROWS[1], _names(written))):
            out.tp[label] += len(names & gold_names)
            out.fp[label] += len(names - gold_names)
            out.fn[label] += len(gold_names - names)
            if misses and label == "mentions":
                for n in names - gold_names:
                    print(f"FP entity     {n!r}  <- {turn['text']}")
                for n in gold_names - names:
                    print(f"FN entity     {n!r}  <- {turn['text']}")
        if not turn["relations"] and not turn["entities"]:
            out.silent += 1
            out.silent_ok += not found.facts
    return out


def default_on(kind: str, every: Score, held_out: Score) -> bool:
    """On when precise enough on all the turns, and on the held-out ones where the kind made
    enough predictions there to be judged."""
    if not every.precision(kind) >= ON_BAR:
        return False
    predicted = held_out.tp[kind] + held_out.fp[kind]
    return predicted < MIN_HELD_OUT or held_out.precision(kind) >= ON_BAR


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=HERE / "data" / "extraction.json")
    parser.add_argument("--misses", action="store_true", help="print each wrong or missed item")
    args = parser.parse_args()
    turns = json.loads(args.data.read_text())["turns"]

    started = time.perf_counter()
    extract("我妹妹在南京。")  # jieba's tagger loads on the first Chinese turn
    load_ms = (time.perf_counter() - started) * 1000
    every = score(turns, misses=args.misses)
    held_out = score([t for t in turns if t["split"] == "held_out"])

    chinese = sum(1 for t in turns if _cjk(t["text"]))
    print(
        f"{len(turns)} turns ({chinese} Chinese), "
        f"{sum(t['split'] == 'held_out' for t in turns)} held out"
    )
    print(
        "| kind | tp | fp | fn | precision | recall | held-out precision (predicted) "
        "| meets the bar | default |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for kind in [*KINDS[:-1], *ENTITY_ROWS]:
        if not (every.tp[kind] + every.fp[kind] + every.fn[kind]):
            continue
        predicted = held_out.tp[kind] + held_out.fp[kind]
        bar = "" if kind == ENTITY_ROWS[1] else "yes" if default_on(kind, every, held_out) else "no"
        on = "" if kind == ENTITY_ROWS[1] else "on" if kind in DEFAULT_KINDS else "off"
        print(
            f"| {kind} | {every.tp[kind]} | {every.fp[kind]} | {every.fn[kind]} | "
            f"{every.precision(kind):.2f} | {every.recall(kind):.2f} | "
            f"{held_out.precision(kind):.2f} ({predicted}) | {bar} | {on} |"
        )
    relations = KINDS[:-1]  # "mentions" is entities
    all_tp, all_fp, all_fn = (sum(c[k] for k in relations) for c in (every.tp, every.fp, every.fn))
    print(
        f"| all relations | {all_tp} | {all_fp} | {all_fn} | "
        f"{all_tp / max(1, all_tp + all_fp):.2f} | {all_tp / max(1, all_tp + all_fn):.2f} | | | |"
    )
    print(f"turns that must yield no relation: {every.silent_ok}/{every.silent} yield none")
    for label, costs in (
        ("English", [c for t, c in zip(turns, every.costs, strict=True) if not _cjk(t["text"])]),
        ("Chinese", [c for t, c in zip(turns, every.costs, strict=True) if _cjk(t["text"])]),
    ):
        costs.sort()
        print(
            f"cost per {label} turn: mean {statistics.fmean(costs):.3f} ms, "
            f"p50 {costs[len(costs) // 2]:.3f} ms, max {costs[-1]:.3f} ms"
        )
    print(f"jieba's tagger loads once, on the first Chinese turn: {load_ms:.0f} ms")


def _cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


if __name__ == "__main__":
    main()
