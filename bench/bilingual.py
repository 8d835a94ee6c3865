"""Bilingual recall development set: ingest `bench/data/bilingual_dev.json` into a running
Strata, ask every question with `reinforce: false` and the set's fixed `as_of`, and report
R@1/5/10 per category, how often an updated fact's newer statement ranks above the older one,
whether a fact ranks above the short reply after it, and the top `scores.semantic` of
questions about things never mentioned (for a relevance threshold). In the same run the
same turns are ranked in-process by BM25 alone (`app.core.terms` tokens) and by the bundled
USE encoder alone, so the service's fusion is judged against both.

Usage: python bench/bilingual.py [--data bench/data/bilingual_dev.json] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from benchlib import (
    JSON,
    Api,
    fmt,
    machine_facts,
    percentile,
    print_machine,
    wait_ready,
    write_json,
)
from retrieval import BM25, Encoder, ranking

KS = (1, 5, 10)
TOP_K = 50
CATEGORIES = ("same_language", "cross_language", "updated_fact", "filler", "no_match")
THRESHOLDS = (0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "bilingual_dev.json"


@dataclass
class Question:
    id: str
    conversation: str
    category: str
    languages: str
    question: str
    evidence: list[str]
    superseded: list[str]
    filler: list[str]


@dataclass
class Ranked:
    """One system's answer to one question: message ids in rank order, and per result the
    score the system reports (the service's `scores.semantic`; cosine or BM25 in-process)."""

    ids: list[str]
    scores: list[float] = field(default_factory=list)

    def rank(self, message_id: str) -> int | None:
        return self.ids.index(message_id) + 1 if message_id in self.ids else None

    def score_of(self, message_id: str) -> float | None:
        r = self.rank(message_id)
        return self.scores[r - 1] if r is not None and self.scores else None


def load(path: Path) -> tuple[JSON, list[Question]]:
    doc: JSON = json.loads(path.read_text())
    questions = [
        Question(
            q["id"],
            q["conversation"],
            q["category"],
            q["languages"],
            q["question"],
            list(q["evidence"]),
            list(q.get("superseded", [])),
            list(q.get("filler", [])),
        )
        for q in doc["questions"]
    ]
    return doc, questions


# --------------------------------------------------------------------------- the service


async def ingest(api: Api, doc: JSON) -> JSON:
    start = time.monotonic()
    accepted = duplicates = 0
    for conv in doc["conversations"]:
        for s in conv["sessions"]:
            data, _ = await api.ingest(s["session_id"], conv["user_id"], s["messages"], True)
            if data is not None:
                accepted += data["accepted"]
                duplicates += data["duplicates"]
    return {"accepted": accepted, "duplicates": duplicates, "seconds": time.monotonic() - start}


async def recall_service(api: Api, doc: JSON, questions: list[Question]) -> dict[str, Ranked]:
    users = {c["id"]: c["user_id"] for c in doc["conversations"]}
    out: dict[str, Ranked] = {}
    for q in questions:
        body = {
            "user_id": users[q.conversation],
            "query": q.question,
            "top_k": TOP_K,
            "as_of": doc["as_of"],
            "reinforce": False,
            # The ranking itself; the min_relevance table below applies thresholds to it.
            "min_relevance": 0,
        }
        data, _ = await api.recall(body)
        if data is None:
            continue
        ids: list[str] = []
        scores: list[float] = []
        for r in data["results"]:
            for src in r["sources"]:  # a merged duplicate stands for each of its messages
                ids.append(src["message_id"])
                scores.append(float(r["scores"]["semantic"]))
        out[q.id] = Ranked(ids, scores)
    return out


# --------------------------------------------------------------------------- in-process


def recall_in_process(
    doc: JSON, questions: list[Question], encoder: Encoder
) -> dict[str, dict[str, Ranked]]:
    """Dense-only (cosine of the bare turn text) and BM25-only (per user) over the same turns."""
    out: dict[str, dict[str, Ranked]] = {"dense": {}, "bm25": {}}
    for conv in doc["conversations"]:
        msgs = [m for s in conv["sessions"] for m in s["messages"]]
        ids = [m["id"] for m in msgs]
        texts = [m["content"] for m in msgs]
        bm25 = BM25(texts)
        vectors = encoder.encode(texts)
        for q in questions:
            if q.conversation != conv["id"]:
                continue
            cos = vectors @ encoder.encode([q.question])[0]
            order = ranking(cos)
            out["dense"][q.id] = Ranked([ids[i] for i in order], [float(cos[i]) for i in order])
            bm = bm25.scores(q.question)
            order = ranking(bm, positive_only=True)
            out["bm25"][q.id] = Ranked([ids[i] for i in order], [float(bm[i]) for i in order])
    return out


# --------------------------------------------------------------------------- metrics


def recall_at(q: Question, r: Ranked, k: int) -> float:
    top = set(r.ids[:k])
    return sum(1 for e in q.evidence if e in top) / len(q.evidence)


def newer_above_older(q: Question, r: Ranked) -> bool:
    new = min((x for e in q.evidence if (x := r.rank(e)) is not None), default=None)
    old = min((x for e in q.superseded if (x := r.rank(e)) is not None), default=None)
    return new is not None and (old is None or new < old)


def fact_above_filler(q: Question, r: Ranked) -> bool:
    fact = min((x for e in q.evidence if (x := r.rank(e)) is not None), default=None)
    reply = min((x for e in q.filler if (x := r.rank(e)) is not None), default=None)
    return fact is not None and (reply is None or fact < reply)


def distribution(values: Sequence[float]) -> JSON:
    return {
        "n": len(values),
        "min": min(values) if values else None,
        "p10": percentile(values, 10),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": max(values) if values else None,
    }


def evaluate(questions: list[Question], ranked: dict[str, Ranked]) -> JSON:
    by_cat: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        if q.id in ranked:
            by_cat[q.category].append(q)
    out: JSON = {}
    answerable = [q for c in CATEGORIES if c != "no_match" for q in by_cat[c]]
    for name, qs in [*((c, by_cat[c]) for c in CATEGORIES if c != "no_match"), ("all", answerable)]:
        m: JSON = {"n": len(qs)}
        for k in KS:
            m[f"R@{k}"] = sum(recall_at(q, ranked[q.id], k) for q in qs) / len(qs) if qs else None
        out[name] = m
    for pair in ("zh-en", "en-zh", "zh-zh", "en-en"):
        qs = [q for q in answerable if q.languages == pair]
        out[f"pair {pair}"] = {
            "n": len(qs),
            **{
                f"R@{k}": sum(recall_at(q, ranked[q.id], k) for q in qs) / len(qs) if qs else None
                for k in KS
            },
        }
    upd = by_cat["updated_fact"]
    out["updated_fact"]["newer_above_older"] = (
        sum(newer_above_older(q, ranked[q.id]) for q in upd) / len(upd) if upd else None
    )
    fil = by_cat["filler"]
    out["filler"]["fact_above_filler"] = (
        sum(fact_above_filler(q, ranked[q.id]) for q in fil) / len(fil) if fil else None
    )
    out["filler"]["ranks"] = [
        {
            "q": q.id,
            "fact": [ranked[q.id].rank(e) for e in q.evidence],
            "filler": [ranked[q.id].rank(e) for e in q.filler],
        }
        for q in fil
    ]
    # Calibration: the best score of a no-match question against the score of the evidence.
    top_none = [max(ranked[q.id].scores) for q in by_cat["no_match"] if ranked[q.id].scores]
    top_ans = [max(ranked[q.id].scores) for q in answerable if ranked[q.id].scores]
    ev = [s for q in answerable for e in q.evidence if (s := ranked[q.id].score_of(e)) is not None]
    out["scores"] = {
        "no_match_top": distribution(top_none),
        "answerable_top": distribution(top_ans),
        "evidence": distribution(ev),
    }
    return out


def threshold_table(questions: list[Question], ranked: dict[str, Ranked]) -> list[JSON]:
    """For a `min_relevance` t, as the service applies it (every result below t dropped,
    then the top 10): no-match questions left with no result, and evidence kept (in the top
    10 of what is left, over all evidence), over all answerable questions and over those
    whose evidence is in another language."""
    nm = [q for q in questions if q.category == "no_match" and q.id in ranked]
    ans = [q for q in questions if q.category != "no_match" and q.id in ranked]
    cross = [q for q in ans if q.languages in ("zh-en", "en-zh")]

    def kept(qs: list[Question], t: float) -> float | None:
        n_ev = sum(len(q.evidence) for q in qs)
        hits = 0
        for q in qs:
            r = ranked[q.id]
            left = [i for i, s in zip(r.ids, r.scores, strict=True) if s >= t][:10]
            hits += sum(1 for e in q.evidence if e in left)
        return hits / n_ev if n_ev else None

    rows = []
    for t in THRESHOLDS:
        empty = sum(1 for q in nm if max(ranked[q.id].scores, default=0.0) < t)
        rows.append(
            {
                "min_relevance": t,
                "no_match_empty": empty / len(nm) if nm else None,
                "R@10": kept(ans, t),
                "R@10 cross-language": kept(cross, t),
            }
        )
    return rows


def print_report(systems: dict[str, JSON]) -> None:
    cols = ["R@1", "R@5", "R@10"]
    names = list(systems)
    print(f"{'category':24s}{'n':>4s}  " + "".join(f"{n:>22s}" for n in names))
    print(f"{'':30s}" + "".join(f"{' / '.join(cols):>22s}" for _ in names))
    first = systems[names[0]]
    for cat in [c for c in first if c != "scores"]:
        row = f"{cat:24s}{first[cat]['n']:>4d}  "
        for n in names:
            m = systems[n][cat]
            row += f"{' / '.join(fmt(m[c], 2) for c in cols):>22s}"
        print(row)
    print(
        "updated facts, newer above older: "
        + ", ".join(f"{n} {fmt(systems[n]['updated_fact']['newer_above_older'], 2)}" for n in names)
    )
    print(
        "fact above the short reply after it: "
        + ", ".join(f"{n} {fmt(systems[n]['filler']['fact_above_filler'], 2)}" for n in names)
    )
    print("top score of no-match questions vs answerable questions and their evidence:")
    for n in names:
        s = systems[n]["scores"]
        print(
            f"  {n:10s} no-match top p10/p50/p90 "
            + "/".join(fmt(s["no_match_top"][k], 3) for k in ("p10", "p50", "p90"))
            + "; answerable top "
            + "/".join(fmt(s["answerable_top"][k], 3) for k in ("p10", "p50", "p90"))
            + "; evidence "
            + "/".join(fmt(s["evidence"][k], 3) for k in ("p10", "p50", "p90"))
        )


async def main_async(args: argparse.Namespace) -> int:
    facts = machine_facts()
    print_machine(facts)
    doc, questions = load(args.data)
    n_turns = sum(len(s["messages"]) for c in doc["conversations"] for s in c["sessions"])
    print(
        f"bilingual dev set: {len(doc['conversations'])} conversations, {n_turns} turns, "
        f"{len(questions)} questions; as_of {doc['as_of']}"
    )
    async with Api(args.url, args.api_key, args.request_timeout) as api:
        if not await wait_ready(api, 60):
            print(f"server at {args.url} is not ready", file=sys.stderr)
            return 2
        ing = await ingest(api, doc)
        print(f"ingest (wait=true): {ing['accepted']} accepted in {ing['seconds']:.1f} s")
        start = time.monotonic()
        service = await recall_service(api, doc, questions)
        print(f"recall: {len(service)}/{len(questions)} in {time.monotonic() - start:.1f} s")
        errors = api.errors
    start = time.monotonic()
    base = recall_in_process(doc, questions, Encoder(threads=2))
    print(f"in-process baselines: {time.monotonic() - start:.1f} s")
    ranked = {"strata": service, "dense": base["dense"], "bm25": base["bm25"]}
    systems = {name: evaluate(questions, r) for name, r in ranked.items()}
    print()
    print_report(systems)
    thresholds = threshold_table(questions, service)
    print(
        "min_relevance on scores.semantic (service): no-match questions left empty / "
        "R@10 kept / R@10 kept, cross-language"
    )
    for row in thresholds:
        print(
            f"  t={row['min_relevance']:.2f}: {fmt(row['no_match_empty'], 2)} / "
            f"{fmt(row['R@10'], 3)} / {fmt(row['R@10 cross-language'], 3)}"
        )
    print()
    errors.print()
    per_question = [
        {
            "id": q.id,
            "category": q.category,
            "languages": q.languages,
            "question": q.question,
            **{
                name: {
                    "evidence_rank": [r[q.id].rank(e) for e in q.evidence] if q.id in r else None,
                    "superseded_rank": [r[q.id].rank(e) for e in q.superseded]
                    if q.id in r
                    else None,
                    "top": list(
                        zip(r[q.id].ids[:3], np.round(r[q.id].scores[:3], 4).tolist(), strict=True)
                    )
                    if q.id in r
                    else None,
                }
                for name, r in ranked.items()
            },
        }
        for q in questions
    ]
    write_json(
        Path(args.out),
        {
            "benchmark": "bilingual_dev",
            "machine": facts,
            "args": {k: v for k, v in vars(args).items() if k != "api_key"},
            "ingest": ing,
            "systems": systems,
            "min_relevance": thresholds,
            "errors": errors.as_json(),
            "questions": per_question,
        },
    )
    return 0 if not errors.total else 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Strata base URL")
    p.add_argument("--out", type=Path, default=Path("bench/results/bilingual.json"))
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
