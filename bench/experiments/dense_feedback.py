"""Two changes to the query's dense vector, offline, in the harness of `wordllama_probe.py`
(each turn as its "Name: text" line, no context turns, the service's weighted RRF with the
dense weight per candidate's language), each searched and fused in place of the first
dense list:

- dense pseudo-relevance feedback (Rocchio): the query's USE vector plus `beta` times the
  mean of the top `m` turns' vectors (of the fused list or of the dense list alone);
- the statement form: an English question's vector blended with that of the question
  without its question word, auxiliary and question mark ("When did Melanie paint a
  sunrise?" → "Melanie paint a sunrise"), the statement's share `a`.

    python bench/experiments/dense_feedback.py --data PATH/locomo10.json \
        --bilingual bench/data/bilingual_dev.json

Prints R@10 over LoCoMo (by category) and over the bilingual set (by category) for each
setting beside the baseline; nothing here looks at answers. Results: bench/README.md,
"Where the R@10 goal of 0.80 stands".
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval import BM25, Encoder, ranking
from wordllama_probe import SERVICE, Corpus, bilingual_corpora, locomo_corpora

from app.core import ranking as rank_rules

Vec = NDArray[np.float32]


@dataclass
class Question:
    sparse: list[int]  # BM25's order
    query: Vec  # unit query vector
    language: rank_rules.Language
    evidence: list[str]
    category: str
    stated: Vec | None = None  # the unit vector of its statement form, if it has one


@dataclass
class Prepared:
    corpus: Corpus
    vectors: Vec  # unit turn vectors
    languages: list[rank_rules.Language]
    questions: list[Question]


def unit(v: Vec) -> Vec:
    out: Vec = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


def prepare(corpora: list[Corpus], use: Encoder) -> list[Prepared]:
    out = []
    for c in corpora:
        bm25 = BM25(c.texts)
        dv = use.encode(c.texts).astype(np.float32)
        dv /= np.linalg.norm(dv, axis=1, keepdims=True)
        qv = use.encode([q for q, _, _ in c.questions]).astype(np.float32)
        qs = [
            Question(ranking(bm25.scores(q), positive_only=True), unit(qv[j]),
                     rank_rules.language(q), evidence, category)
            for j, (q, evidence, category) in enumerate(c.questions)
        ]  # fmt: skip
        forms = [statement_form(q) for q, _, _ in c.questions]
        changed = [j for j, f in enumerate(forms) if f is not None]
        if changed:
            sv = use.encode([forms[j] or "" for j in changed]).astype(np.float32)
            for j, v in zip(changed, sv, strict=True):
                qs[j].stated = unit(v)
        out.append(Prepared(c, dv, [rank_rules.language(t) for t in c.texts], qs))
    return out


_OPENING = re.compile(
    r"^\s*(?:what|when|where|who|whom|which|how|why)(?:\s+(?:kind|type|sort)s?\s+of)?"
    r"(?:\s+(\w+))?\s+(?:did|does|do|is|are|was|were|has|have|had|will|would|can|could)\b",
    re.IGNORECASE,
)


def statement_form(query: str) -> str | None:
    """The question without its opening and question mark; None for Chinese or no change."""
    if rank_rules.language(query) == "zh":
        return None
    form = _OPENING.sub(lambda m: m[1] or "", query, count=1).strip().removesuffix("?").strip()
    return form if form and form != query.strip() else None


def fused(p: Prepared, q: Question, cos: Vec) -> list[int]:
    """The service's weighted RRF of BM25 and the dense order `cos`."""
    scores: dict[int, float] = {}
    for r, i in enumerate(np.argsort(-cos).tolist(), 1):
        w = SERVICE.dense_for(q.language, p.languages[i])
        scores[i] = scores.get(i, 0.0) + 1.0 / (SERVICE.k - 1 + r / w)
    for r, i in enumerate(q.sparse, 1):
        scores[i] = scores.get(i, 0.0) + 1.0 / (SERVICE.k - 1 + r / SERVICE.sparse)
    return sorted(scores, key=lambda i: -scores[i])


Rule = Callable[[Prepared, Question], list[int]]


def feedback(m: int, beta: float, seed: str) -> Rule:
    def rule(p: Prepared, q: Question) -> list[int]:
        cos = p.vectors @ q.query
        base = fused(p, q, cos)
        if m == 0:
            return base
        top = (base if seed == "fused" else np.argsort(-cos).tolist())[:m]
        expanded = unit(q.query + beta * unit(p.vectors[top].mean(axis=0)))
        return fused(p, q, p.vectors @ expanded)

    return rule


def stated(a: float) -> Rule:
    def rule(p: Prepared, q: Question) -> list[int]:
        v = q.query if q.stated is None else unit((1 - a) * q.query + a * q.stated)
        return fused(p, q, p.vectors @ v)

    return rule


def r_at_10(p: Prepared, rule: Rule) -> tuple[list[float], dict[str, list[float]]]:
    values: list[float] = []
    by: dict[str, list[float]] = {}
    for q in p.questions:
        top = {p.corpus.ids[i] for i in rule(p, q)[:10]}
        r = sum(e in top for e in q.evidence) / len(q.evidence)
        values.append(r)
        by.setdefault(q.category, []).append(r)
    return values, by


def report(sets: Sequence[Prepared], rule: Rule) -> str:
    values: list[float] = []
    by: dict[str, list[float]] = {}
    for p in sets:
        v, b = r_at_10(p, rule)
        values += v
        for k, x in b.items():
            by.setdefault(k, []).extend(x)
    cats = " ".join(f"{k} {np.mean(v):.3f}" for k, v in sorted(by.items()))
    return f"{np.mean(values):.3f} ({cats})"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, required=True, help="LoCoMo locomo10.json")
    ap.add_argument("--bilingual", type=Path, required=True, help="bench/data/bilingual_dev.json")
    args = ap.parse_args(argv)
    use = Encoder(threads=2)
    locomo = prepare(locomo_corpora(args.data, line=True), use)
    bilingual = prepare(bilingual_corpora(args.bilingual), use)
    rules = [("baseline", feedback(0, 0.0, ""))] + [
        (f"{seed} top {m}, beta {beta}", feedback(m, beta, seed))
        for seed in ("fused", "dense")
        for m in (3, 5, 10)
        for beta in (0.3, 0.6, 1.0)
    ]
    rules += [(f"statement form, a {a}", stated(a)) for a in (0.3, 0.5, 1.0)]
    for name, rule in rules:
        print(f"{name:22s} LoCoMo R@10 {report(locomo, rule)}")
        print(f"{'':22s} bilingual    {report(bilingual, rule)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
