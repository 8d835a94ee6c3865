"""EXPERIMENT HARNESS (not a benchmark of the service): an in-process reproduction of
Strata's recall ranking, from the service's own building blocks (`app.core.chunking`'s
turn lines and importance, `app.core.terms`' term vectors, the bundled USE encoder,
`app.core.scoring`), and variants of it that address "Recall a user can trust":

  (a) a fact ranked below the reply indexed with it as context,
  (b) `scores.semantic` a rank, not a relevance,
  (c) cross-language evidence buried by same-language lexical noise,
  (d) an older statement outranking the newer one that changed it.

Every variant is scored on LoCoMo's evaluation conversations (R@10 and recall within 1,000
o200k tokens, as bench/locomo.py) AND on the bilingual development set (per category), so
nothing is tuned on English LoCoMo alone. The relevance calibration is fitted on LoCoMo
conversations held apart from the evaluation ones (`--fit-conversations`).

Usage: python bench/experiments/recall_grid.py --locomo PATH [--bilingual PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import toktok
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import JSON, write_json
from locomo import load_conversations
from retrieval import Encoder, ServedEncoder

from app.core import chunking, scoring, terms
from app.settings import Settings

Vec = NDArray[np.float64]
SETTINGS = Settings()
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile(r"[A-Za-z]")
# A statement that replaces an earlier one (d); as `app.core.ranking` (no bare "now").
CHANGE = re.compile(
    r"改成|改到|改为|换成|换了|取消|不再|推迟|提前|搬到|退了|"
    r"\b(instead|changed?|cancel(?:l?ed)?|no longer|moved|switched|postponed|rescheduled|"
    r"stopped|quit)\b",
    re.IGNORECASE,
)


def asks_only(t: Turn) -> bool:
    """An assistant turn that is a short question and states nothing."""
    text = t.content.strip()
    return t.role == "assistant" and text.endswith(("?", "？")) and len(terms.tokenize(text)) <= 4


def language(text: str) -> str:
    """'zh', 'en' or 'mixed', from the share of CJK characters among letters."""
    cjk = len(CJK.findall(text))
    latin = len(LATIN.findall(text))
    if cjk + latin == 0:
        return "en"
    share = cjk / (cjk + latin / 4)  # ~4 Latin letters per word, ~1.5 CJK characters
    return "zh" if share > 0.8 else "en" if share < 0.2 else "mixed"


# --------------------------------------------------------------------------- corpus


@dataclass
class Turn:
    id: str  # message id
    session: str
    role: str
    line: str  # "speaker: content", the memory's content
    content: str
    created_at: float


@dataclass
class Corpus:
    """One user's memories as the service indexes them (one per turn)."""

    turns: list[Turn]
    chunk_dense: NDArray[np.float32] = field(init=False)
    turn_dense: NDArray[np.float32] = field(init=False)
    sparse: list[dict[int, float]] = field(init=False)  # the service's vector (with context)
    sparse_self: list[dict[int, float]] = field(init=False)  # the turn's own terms only
    df: dict[int, int] = field(init=False)
    lang: list[str] = field(init=False)
    importance: Vec = field(init=False)
    short: Vec = field(init=False)
    change: Vec = field(init=False)
    asks: Vec = field(init=False)

    def build(self, encoder: Encoder | ServedEncoder) -> Corpus:
        s = SETTINGS
        lines = [t.line for t in self.turns]
        self.turn_dense = encoder.encode(lines)
        by_session: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(self.turns):
            by_session[t.session].append(i)
        chunk = self.turn_dense.copy()
        self.sparse, self.sparse_self = [{} for _ in lines], [{} for _ in lines]
        w = s.dense_context_weight
        for idx in by_session.values():
            for pos, i in enumerate(idx):
                before = idx[max(0, pos - s.dense_context_turns) : pos]
                if before and w > 0:
                    ctx = self.turn_dense[before].mean(axis=0)
                    v = (1 - w) * self.turn_dense[i] + w * ctx
                    chunk[i] = v / max(float(np.linalg.norm(v)), 1e-9)
                sctx = [lines[j] for j in idx[max(0, pos - s.sparse_context_turns) : pos]]
                after = [lines[idx[pos + 1]]] if pos + 1 < len(idx) else []
                dv = terms.document_vector(
                    lines[i], sctx, s.sparse_context_weight, after, s.sparse_next_weight
                )
                self.sparse[i] = dict(zip(dv.indices, dv.values, strict=True))
                dv = terms.document_vector(lines[i])
                self.sparse_self[i] = dict(zip(dv.indices, dv.values, strict=True))
        self.chunk_dense = chunk
        self.df = defaultdict(int)
        for vec in self.sparse:
            for tid in vec:
                self.df[tid] += 1
        self.lang = [language(t.content) for t in self.turns]
        self.importance = np.array([chunking.heuristic_importance(t.content) for t in self.turns])
        self.short = np.array([len(terms.tokenize(t.content)) for t in self.turns], dtype=float)
        self.change = np.array([1.0 if CHANGE.search(t.content) else 0.0 for t in self.turns])
        self.asks = np.array([1.0 if asks_only(t) else 0.0 for t in self.turns])
        return self

    def idf(self, tid: int) -> float:
        n, c = len(self.turns), self.df.get(tid, 0)
        return math.log(1 + (n - c + 0.5) / (c + 0.5))


@dataclass
class Features:
    """Per candidate (every turn of the user), for one query."""

    cos_chunk: Vec
    cos_turn: Vec
    sparse: Vec  # the service's sparse score (IDF · BM25 tf, context included)
    cov_self: Vec  # IDF-weighted share of the query's terms found in the turn itself
    cov_chunk: Vec  # ... in the turn or its context
    cov_plain: Vec  # share of the query's distinct terms in the turn itself, no IDF
    cov_plain_chunk: Vec  # ... in the turn or its context, no IDF
    qlang: str
    alive: NDArray[np.bool_]  # created at or before as_of


def features(c: Corpus, query: str, qvec: NDArray[np.float32], as_of: float) -> Features:
    n = len(c.turns)
    cos_chunk = (c.chunk_dense @ qvec).astype(np.float64)
    cos_turn = (c.turn_dense @ qvec).astype(np.float64)
    qids = sorted({terms.term_id(t) for t in terms.tokenize(query)})
    sparse, cov_self, cov_chunk, plain = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    plain_chunk = np.zeros(n)
    idfs = {tid: c.idf(tid) for tid in qids}
    total = sum(idfs.values()) or 1.0
    for i in range(n):
        vec, own = c.sparse[i], c.sparse_self[i]
        for tid in qids:
            if tid in vec:
                sparse[i] += idfs[tid] * vec[tid]
                cov_chunk[i] += idfs[tid]
                plain_chunk[i] += 1
            if tid in own:
                cov_self[i] += idfs[tid]
                plain[i] += 1
    alive = np.array([t.created_at <= as_of for t in c.turns])
    return Features(
        cos_chunk,
        cos_turn,
        sparse,
        cov_self / total,
        cov_chunk / total,
        plain / max(len(qids), 1),
        plain_chunk / max(len(qids), 1),
        language(query),
        alive,
    )


# --------------------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Variant:
    name: str
    dense_weight: float = SETTINGS.dense_weight
    sparse_weight: float = SETTINGS.sparse_weight
    rrf_k: int = SETTINGS.rrf_k
    pool: int = 50
    # (c) a candidate in another language than the query: its dense rank counts at this weight
    cross_dense_weight: float | None = None
    # (c) the query's language is rare in the user's corpus: dense weight raised to this
    # (b) rank by relevance blended into the fused score: key = (1-m)·rrf_norm + m·relevance
    relevance_mix: float = 0.0
    # (a) a turn matched only through its context: fused score × (1 − own_penalty·(1 − own))
    own_penalty: float = 0.0
    own_sparse_only: bool = False  # judge "own" from the turn's terms only (no turn vector)
    # (a) low-information turns (≤ short_terms index terms): fused score × (1 − short_penalty)
    short_penalty: float = 0.0
    short_terms: int = 3
    # (a) an assistant turn that only asks ("How do you like it?"): fused score × (1 − p)
    question_penalty: float = 0.0
    # (d) a newer turn that states a change, similar to a higher-ranked older one, goes above it
    change_promote: bool = False
    change_sim: float = 0.5
    change_by_chunk_vectors: bool = False  # the stored (context-blended) vectors, not the turn's
    plain_coverage: bool = False  # "own" from unweighted term shares (no per-user IDF needed)
    # weights of the composite score
    w_semantic: float = SETTINGS.weight_semantic
    w_recency: float = SETTINGS.weight_recency
    w_importance: float = SETTINGS.weight_importance


Calibrator = Callable[[Features], Vec]


def rank(
    c: Corpus, f: Features, v: Variant, as_of: float, calibrate: Calibrator | None, top_k: int
) -> tuple[list[int], list[float]]:
    """Indices of the top_k results in order and their reported `semantic` term."""
    alive = np.flatnonzero(f.alive)
    dense_order = alive[np.argsort(-f.cos_chunk[alive], kind="stable")][: v.pool]
    sp = alive[f.sparse[alive] > 0]
    sparse_order = sp[np.argsort(-f.sparse[sp], kind="stable")][: v.pool]
    fused: dict[int, float] = defaultdict(float)
    k = v.rrf_k
    for r, i in enumerate(dense_order, 1):
        w = v.dense_weight
        if v.cross_dense_weight is not None and c.lang[i] != f.qlang and c.lang[i] != "mixed":
            w = v.cross_dense_weight
        fused[int(i)] += 1.0 / (k - 1 + r / w)
    for r, i in enumerate(sparse_order, 1):
        fused[int(i)] += 1.0 / (k - 1 + r / v.sparse_weight)
    best = sum(1.0 / (k - 1 + 1.0 / w) for w in (v.dense_weight, v.sparse_weight))
    cand = np.array(sorted(fused), dtype=int)
    if len(cand) == 0:
        return [], []
    # The service fuses into `limit` results before scoring.
    fused_arr = np.array([fused[int(i)] for i in cand])
    keep = np.argsort(-fused_arr, kind="stable")[: max(top_k, v.pool)]
    cand, fused_arr = cand[keep], fused_arr[keep]
    rrf_norm = np.clip(fused_arr / best, 0, 1)
    if v.own_penalty:
        num, den = (
            (f.cov_plain, f.cov_plain_chunk) if v.plain_coverage else (f.cov_self, f.cov_chunk)
        )
        own = num[cand] / np.maximum(den[cand], 1e-9) * (den[cand] > 0)
        if v.own_sparse_only:
            own = np.where(den[cand] > 0, own, 1.0)
        else:
            own = np.maximum(
                own, np.clip(f.cos_turn[cand] / np.maximum(f.cos_chunk[cand], 1e-9), 0, 1)
            )
        rrf_norm = rrf_norm * (1 - v.own_penalty * (1 - np.clip(own, 0, 1)))
    if v.short_penalty:
        rrf_norm = rrf_norm * np.where(c.short[cand] <= v.short_terms, 1 - v.short_penalty, 1.0)
    if v.question_penalty:
        rrf_norm = rrf_norm * np.where(c.asks[cand] > 0, 1 - v.question_penalty, 1.0)
    relevance = calibrate(f)[cand] if calibrate is not None else rrf_norm
    key_sem = (1 - v.relevance_mix) * rrf_norm + v.relevance_mix * relevance
    days = np.maximum(0.0, (as_of - np.array([c.turns[i].created_at for i in cand])) / 86400)
    recency = np.exp(-SETTINGS.recency_lambda_per_day * days)
    importance = SETTINGS.importance_intrinsic_share * c.importance[cand]
    ww = scoring.Weights(v.w_semantic, v.w_recency, v.w_importance).normalised()
    score = ww.semantic * key_sem + ww.recency * recency + ww.importance * importance
    order = list(np.argsort(-score, kind="stable")[:top_k])
    if v.change_promote:
        vectors = c.chunk_dense if v.change_by_chunk_vectors else c.turn_dense
        order = promote_changes(c, cand, order, v.change_sim, vectors)
    return [int(cand[j]) for j in order], [float(relevance[j]) for j in order]


def promote_changes(
    c: Corpus, cand: NDArray[Any], order: list[Any], sim: float, vectors: NDArray[np.float32]
) -> list[Any]:
    """(d): a result that states a change (改成/取消/instead/no longer…) and is newer than a
    similar result ranked above it is moved just above the highest such older result."""
    out = list(order)
    for j in list(order):
        i = int(cand[j])
        if not c.change[i]:
            continue
        pos = out.index(j)
        for p in range(pos):
            o = int(cand[out[p]])
            if (
                c.turns[o].created_at < c.turns[i].created_at
                and float(vectors[o] @ vectors[i]) >= sim
            ):
                out.insert(p, out.pop(pos))
                break
    return out


# --------------------------------------------------------------------------- calibration


def logistic_fit(x: Vec, y: Vec, l2: float = 1e-3, iters: int = 50) -> Vec:
    """Logistic regression by Newton's method (a column of ones is added)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + l2 * w
        h = (xb * (p * (1 - p))[:, None]).T @ xb + l2 * np.eye(len(w))
        step = np.linalg.solve(h, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def design(f: Features) -> Vec:
    return np.stack([f.cos_turn, f.cos_chunk, f.cov_self, f.cov_chunk], axis=1)


def design_service(f: Features) -> Vec:
    """What recall can compute without new stored vectors: the chunk's cosine (from the
    dense vector) and the share of the query's terms in the result's own content."""
    return np.stack([f.cos_chunk, f.cov_plain], axis=1)


SHIFT = 6.3
FEATURES = ("cos_turn", "cos_chunk", "cov_self", "cov_chunk")
FEATURES_SERVICE = ("cos_chunk", "cov_plain")
FEATURES_PLAIN = ("cos_turn", "cos_chunk", "cov_plain", "cov_plain_chunk")


def design_plain(f: Features) -> Vec:
    """The four features with unweighted term shares: no per-user IDF needed at query time."""
    return np.stack([f.cos_turn, f.cos_chunk, f.cov_plain, f.cov_plain_chunk], axis=1)


def calibrator(w: Vec, make: Callable[[Features], Vec] = design) -> Calibrator:
    def apply(f: Features) -> Vec:
        z = make(f) @ w[:-1] + w[-1]
        out: Vec = 1 / (1 + np.exp(-z))
        return out

    return apply


# --------------------------------------------------------------------------- data sets


@dataclass
class Query:
    id: str
    user: str
    text: str
    evidence: list[str]
    category: str
    as_of: float
    superseded: list[str] = field(default_factory=list)
    filler: list[str] = field(default_factory=list)
    languages: str = ""


def locomo_sets(path: Path) -> tuple[dict[str, list[Turn]], list[Query]]:
    convs = load_conversations(path, 10)
    users: dict[str, list[Turn]] = {}
    queries: list[Query] = []
    for conv in convs:
        turns = []
        for s in conv.sessions:
            for m in s.messages:
                line = f"{m['metadata']['name']}: {m['content']}"
                ts = datetime.fromisoformat(m["created_at"]).timestamp()
                turns.append(Turn(m["id"], s.session_id, m["role"], line, m["content"], ts))
        users[conv.user_id] = turns
        as_of = conv.as_of.timestamp()
        for q in conv.questions:
            queries.append(
                Query(
                    f"{conv.index}:{q.index}",
                    conv.user_id,
                    q.question,
                    q.evidence,
                    str(q.category),
                    as_of,
                )
            )
    return users, queries


def bilingual_sets(path: Path) -> tuple[dict[str, list[Turn]], list[Query]]:
    doc = json.loads(path.read_text())
    users: dict[str, list[Turn]] = {}
    for conv in doc["conversations"]:
        users[conv["id"]] = [
            Turn(
                m["id"],
                s["session_id"],
                m["role"],
                f"{m['role']}: {m['content']}",
                m["content"],
                datetime.fromisoformat(m["created_at"]).timestamp(),
            )
            for s in conv["sessions"]
            for m in s["messages"]
        ]
    as_of = datetime.fromisoformat(doc["as_of"]).timestamp()
    queries = [
        Query(
            q["id"],
            q["conversation"],
            q["question"],
            q["evidence"],
            q["category"],
            as_of,
            q.get("superseded", []),
            q.get("filler", []),
            q["languages"],
        )
        for q in doc["questions"]
    ]
    return users, queries


def readme_example(speaker: str = "user") -> tuple[dict[str, list[Turn]], list[Query]]:
    """Issue (a): the README's three turns; m1 carries its own past time, the rest 'now'.
    `speaker` is the name the user's lines carry (the service uses the role without a
    `metadata.name`)."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()
    m1 = datetime.fromisoformat("2025-05-03T10:00:00+01:00").timestamp()
    turns = [
        Turn("m1", "chat-1", "user", f"{speaker}: I moved to Lisbon last May.", "", m1),
        Turn("m2", "chat-1", "assistant", "assistant: How do you like it?", "", now),
        Turn("m3", "chat-1", "user", f"{speaker}: 我很喜欢这里的海鲜。", "", now),
    ]
    turns = [replace(t, content=t.line.split(": ", 1)[1]) for t in turns]
    return {"ana": turns}, [Query("ana", "ana", "Where does Ana live?", ["m1"], "a", now)]


# --------------------------------------------------------------------------- evaluation


@dataclass
class Prepared:
    corpus: dict[str, Corpus]
    queries: list[Query]
    feats: dict[str, Features]


def prepare(
    users: dict[str, list[Turn]], queries: list[Query], encoder: Encoder | ServedEncoder
) -> Prepared:
    corpus = {u: Corpus(t).build(encoder) for u, t in users.items()}
    qv = encoder.encode_queries([q.text for q in queries])
    feats = {q.id: features(corpus[q.user], q.text, qv[i], q.as_of) for i, q in enumerate(queries)}
    return Prepared(corpus, queries, feats)


def run(
    p: Prepared, v: Variant, cal: Calibrator | None, top_k: int = 50
) -> dict[str, tuple[list[str], list[float]]]:
    out = {}
    for q in p.queries:
        c = p.corpus[q.user]
        idx, sem = rank(c, p.feats[q.id], v, q.as_of, cal, top_k)
        out[q.id] = ([c.turns[i].id for i in idx], sem)
    return out


def r_at(q: Query, ids: list[str], k: int) -> float:
    top = set(ids[:k])
    return sum(1 for e in q.evidence if e in top) / len(q.evidence)


def budget_recall(q: Query, ids: list[str], tokens: dict[str, int], budget: int) -> float:
    found, used = set(), 0
    for i in ids:
        if used + tokens[i] > budget:
            break
        used += tokens[i]
        found.add(i)
    return sum(1 for e in q.evidence if e in found) / len(q.evidence)


def locomo_metrics(
    p: Prepared, res: dict[str, tuple[list[str], list[float]]], tokens: dict[str, int]
) -> JSON:
    qs = p.queries
    return {
        "n": len(qs),
        "R@5": float(np.mean([r_at(q, res[q.id][0], 5) for q in qs])),
        "R@10": float(np.mean([r_at(q, res[q.id][0], 10) for q in qs])),
        "B1000": float(np.mean([budget_recall(q, res[q.id][0], tokens, 1000) for q in qs])),
    }


def first_rank(ids: list[str], wanted: list[str]) -> int | None:
    ranks = [ids.index(e) + 1 for e in wanted if e in ids]
    return min(ranks) if ranks else None


def bilingual_metrics(p: Prepared, res: dict[str, tuple[list[str], list[float]]]) -> JSON:
    out: JSON = {}
    cats: dict[str, list[Query]] = defaultdict(list)
    for q in p.queries:
        cats[q.category].append(q)
    for cat in ("same_language", "cross_language", "updated_fact", "filler"):
        qs = cats[cat]
        out[cat] = {
            f"R@{k}": float(np.mean([r_at(q, res[q.id][0], k) for q in qs])) for k in (1, 5, 10)
        }
    ans = [q for q in p.queries if q.category != "no_match"]
    out["all"] = {
        f"R@{k}": float(np.mean([r_at(q, res[q.id][0], k) for q in ans])) for k in (1, 5, 10)
    }

    def above(q: Query, other: list[str]) -> bool:
        a, b = first_rank(res[q.id][0], q.evidence), first_rank(res[q.id][0], other)
        return a is not None and (b is None or a < b)

    out["newer_above_older"] = float(
        np.mean([above(q, q.superseded) for q in cats["updated_fact"]])
    )
    out["fact_above_filler"] = float(np.mean([above(q, q.filler) for q in cats["filler"]]))
    nm = [res[q.id][1][0] if res[q.id][1] else 0.0 for q in cats["no_match"]]
    ev = [
        res[q.id][1][res[q.id][0].index(e)]
        for q in ans
        for e in q.evidence
        if e in res[q.id][0][:10]
    ]
    top = [res[q.id][1][0] for q in ans if res[q.id][1]]
    out["no_match_top"] = [float(np.percentile(nm, x)) for x in (10, 50, 90)]
    out["answerable_top"] = [float(np.percentile(top, x)) for x in (10, 50, 90)]
    out["evidence_in_top10"] = [float(np.percentile(ev, x)) for x in (10, 50, 90)] if ev else []
    out["thresholds"] = {}
    n_ev = sum(len(q.evidence) for q in ans)
    for t in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5):
        empty = float(np.mean([x < t for x in nm]))
        kept = sum(
            1
            for q in ans
            for e in q.evidence
            if e in res[q.id][0][:10] and res[q.id][1][res[q.id][0].index(e)] >= t
        )
        out["thresholds"][str(t)] = {"no_match_empty": empty, "R@10_kept": kept / n_ev}
    return out


def relevance_study(bi: Prepared, lo: Prepared, v: Variant, cal: Calibrator | None) -> JSON:
    """The reported relevance of no-match questions' best result against that of evidence
    found in the top 10: AUC, and the share of evidence kept by a threshold that empties
    80% / 90% of the no-match questions (bilingual set; LoCoMo evaluation questions)."""
    res = run(bi, v, cal)
    # A threshold empties a no-match question only if every result is below it: its best.
    nm = [max(res[q.id][1], default=0.0) for q in bi.queries if q.category == "no_match"]
    ans = [q for q in bi.queries if q.category != "no_match"]
    n_ev = sum(len(q.evidence) for q in ans)
    ev = [
        res[q.id][1][res[q.id][0].index(e)]
        for q in ans
        for e in q.evidence
        if e in res[q.id][0][:10]
    ]
    lo_res = run(lo, v, cal)
    lo_n = sum(len(q.evidence) for q in lo.queries)
    lo_ev = [
        lo_res[q.id][1][lo_res[q.id][0].index(e)]
        for q in lo.queries
        for e in q.evidence
        if e in lo_res[q.id][0][:10]
    ]
    auc = float(np.mean([[1.0 if e > n else 0.5 if e == n else 0.0 for n in nm] for e in ev]))
    t80, t90 = float(np.percentile(nm, 80)), float(np.percentile(nm, 90))
    curve = [
        {
            "no_match_emptied": share / 100,
            "t": (t := float(np.percentile(nm, share))),
            "bilingual_R@10_kept": sum(x > t for x in ev) / n_ev,
            "locomo_R@10_kept": sum(x > t for x in lo_ev) / lo_n,
        }
        for share in (10, 25, 50, 75, 90)
    ]
    return {
        "curve": curve,
        "bilingual_R@10": len(ev) / n_ev,
        "locomo_R@10": len(lo_ev) / lo_n,
        "auc": auc,
        "no_match_top": [float(np.percentile(nm, x)) for x in (10, 50, 80, 90, 100)],
        "evidence_in_top10": [float(np.percentile(ev, x)) for x in (10, 25, 50, 90)],
        "locomo_evidence_in_top10": [float(np.percentile(lo_ev, x)) for x in (10, 25, 50, 90)],
        "t80": t80,
        "t90": t90,
        "kept80": sum(x > t80 for x in ev) / n_ev,
        "kept90": sum(x > t90 for x in ev) / n_ev,
        "lo_kept80": sum(x > t80 for x in lo_ev) / lo_n,
        "lo_kept90": sum(x > t90 for x in lo_ev) / lo_n,
    }


def min_relevance_table(bi: Prepared, lo: Prepared, v: Variant, rel: Calibrator) -> list[JSON]:
    """`min_relevance` as the service would apply it (results below it dropped before top_k):
    no-match questions left empty, their results left in the top 10, R@10 kept."""
    res, lo_res = run(bi, v, rel), run(lo, v, rel)
    nm = [q for q in bi.queries if q.category == "no_match"]
    ans = [q for q in bi.queries if q.category != "no_match"]
    rows = []
    for t in (0.0, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7):

        def kept(r: tuple[list[str], list[float]], t: float = t) -> list[str]:
            return [i for i, x in zip(*r, strict=True) if x >= t]

        rows.append(
            {
                "min_relevance": t,
                "no_match_empty": float(np.mean([not kept(res[q.id]) for q in nm])),
                "no_match_results_in_top10": float(
                    np.mean([len(kept(res[q.id])[:10]) for q in nm])
                ),
                "bilingual_R@10": float(np.mean([r_at(q, kept(res[q.id]), 10) for q in ans])),
                "locomo_R@10": float(
                    np.mean([r_at(q, kept(lo_res[q.id]), 10) for q in lo.queries])
                ),
            }
        )
    return rows


def summary_line(row: JSON) -> str:
    lo, b = row["locomo_eval"], row["bilingual"]
    cats = " ".join(
        f"{c[:5]} {b[c]['R@10']:.2f}"
        for c in ("same_language", "cross_language", "updated_fact", "filler")
    )
    r = b["all"]
    return (
        f"{row['variant']:40s} LoCoMo R@10 {lo['R@10']:.3f} B1000 {lo['B1000']:.3f} | "
        f"bi R@10 {cats}; all R@1/5/10 {r['R@1']:.2f}/{r['R@5']:.2f}/{r['R@10']:.2f} | "
        f"new>old {b['newer_above_older']:.2f} fact>filler {b['fact_above_filler']:.2f} | "
        f"README fact rank {row['readme_example_rank_of_fact']} "
        f"(named {row['readme_example_rank_with_user_id_as_speaker']})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument(
        "--bilingual",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "data" / "bilingual_dev.json",
    )
    ap.add_argument("--fit-conversations", type=int, default=3, help="LoCoMo conversations 0..N-1")
    ap.add_argument("--out", type=Path, default=Path("bench/results/recall_grid.json"))
    ap.add_argument(
        "--embedding-url",
        help="fit for this OpenAI-compatible server instead of the bundled encoder (then also "
        "--embedding-model, and the service's query model and prefixes if it uses them)",
    )
    ap.add_argument("--embedding-model", default="text-embedding-3-small")
    ap.add_argument("--embedding-query-model")
    ap.add_argument("--embedding-query-prefix", default="")
    ap.add_argument("--embedding-document-prefix", default="")
    args = ap.parse_args()
    t0 = time.monotonic()
    encoder: Encoder | ServedEncoder = (
        ServedEncoder(
            args.embedding_url,
            args.embedding_model,
            query_model=args.embedding_query_model,
            query_prefix=args.embedding_query_prefix,
            document_prefix=args.embedding_document_prefix,
        )
        if args.embedding_url
        else Encoder(threads=2)
    )
    lo_users, lo_queries = locomo_sets(args.locomo)
    fit_users = set(list(dict.fromkeys(q.user for q in lo_queries))[: args.fit_conversations])
    lo = prepare(lo_users, lo_queries, encoder)
    fit = Prepared(lo.corpus, [q for q in lo_queries if q.user in fit_users], lo.feats)
    ev = Prepared(lo.corpus, [q for q in lo_queries if q.user not in fit_users], lo.feats)
    bi = prepare(*bilingual_sets(args.bilingual), encoder)
    ex = prepare(*readme_example(), encoder)
    ex_named = prepare(*readme_example("ana"), encoder)
    print(
        f"prepared in {time.monotonic() - t0:.0f} s: LoCoMo fit {len(fit.queries)} / eval "
        f"{len(ev.queries)} questions, bilingual {len(bi.queries)}"
    )
    line_tokens = {}
    for c in lo.corpus.values():
        counts = toktok.batch_count([t.line for t in c.turns], "o200k_base")
        line_tokens.update({t.id: int(n) for t, n in zip(c.turns, counts, strict=True)})

    # Calibration: P(evidence | features) over each fit question's candidate pool.
    xs, xs2, xs3, ys = [], [], [], []
    for q in fit.queries:
        f = fit.feats[q.id]
        c = fit.corpus[q.user]
        idx, _ = rank(c, f, Variant("base"), q.as_of, None, 50)
        xs.append(design(f)[idx])
        xs2.append(design_service(f)[idx])
        xs3.append(design_plain(f)[idx])
        ids = [c.turns[i].id for i in idx]
        ys.append(np.array([1.0 if i in q.evidence else 0.0 for i in ids]))
    w = logistic_fit(np.vstack(xs), np.concatenate(ys))
    print(
        "calibration logit = "
        + " + ".join(f"{b:.3f}·{n}" for b, n in zip(w[:-1], FEATURES, strict=True))
        + f" + {w[-1]:.3f}"
    )
    cal = calibrator(w)
    w2 = logistic_fit(np.vstack(xs2), np.concatenate(ys))
    print(
        "service-feasible calibration logit = "
        + " + ".join(f"{b:.3f}·{n}" for b, n in zip(w2[:-1], FEATURES_SERVICE, strict=True))
        + f" + {w2[-1]:.3f}"
    )
    cal2 = calibrator(w2, design_service)
    w3 = logistic_fit(np.vstack(xs3), np.concatenate(ys))
    print(
        "plain-coverage calibration logit = "
        + " + ".join(f"{b:.3f}·{n}" for b, n in zip(w3[:-1], FEATURES_PLAIN, strict=True))
        + f" + {w3[-1]:.3f}"
    )
    cal3 = calibrator(w3, design_plain)
    names = ("cos_turn", "cos_chunk", "cov_own", "cov_chunk", "bias")
    weights = {n: round(float(b), 3) for n, b in zip(names, w3, strict=True)}
    print(f"STRATA_RELEVANCE_WEIGHTS='{json.dumps(weights)}'")

    def shifted3(f: Features) -> Vec:
        p_ = cal3(f)
        out: Vec = 1 / (1 + np.exp(-(np.log(p_ / (1 - p_)) + SHIFT)))
        return out

    variants = [
        Variant("service today (reproduction)"),
        Variant("dense weight 0.5", dense_weight=0.5),
        Variant("dense weight 1.0", dense_weight=1.0),
        Variant("cross-language dense at 1.0", cross_dense_weight=1.0),
        Variant("cross-language dense at 2.0", cross_dense_weight=2.0),
        Variant("cross-language dense at 3.0", cross_dense_weight=3.0),
        Variant("context-only penalty 0.3", own_penalty=0.3),
        Variant("context-only penalty 0.5", own_penalty=0.5),
        Variant("context-only penalty 0.5, terms only", own_penalty=0.5, own_sparse_only=True),
        Variant("short-turn penalty 0.2 (≤3 terms)", short_penalty=0.2),
        Variant("short-turn penalty 0.4 (≤3 terms)", short_penalty=0.4),
        Variant("change promotion (sim 0.5)", change_promote=True, change_sim=0.5),
        Variant("change promotion (sim 0.4)", change_promote=True, change_sim=0.4),
        Variant("relevance mix 0.5", relevance_mix=0.5),
        Variant("relevance mix 1.0", relevance_mix=1.0),
        Variant("recency weight 0.15", w_recency=0.15),
        Variant("importance weight 0", w_importance=0.0),
        Variant("asking-only assistant turn penalty 0.3", question_penalty=0.3),
        Variant("asking-only assistant turn penalty 0.5", question_penalty=0.5),
    ]
    combos = [
        Variant(
            "C1: cross 2.0 + own 0.3 + change 0.5",
            cross_dense_weight=2.0,
            own_penalty=0.3,
            change_promote=True,
        ),
        Variant(
            "C2: C1 + short 0.2",
            cross_dense_weight=2.0,
            own_penalty=0.3,
            change_promote=True,
            short_penalty=0.2,
        ),
        Variant(
            "C3: C1 + relevance mix 0.5",
            cross_dense_weight=2.0,
            own_penalty=0.3,
            change_promote=True,
            relevance_mix=0.5,
        ),
        Variant(
            "C4: cross 2.0 + own 0.5 + change 0.4",
            cross_dense_weight=2.0,
            own_penalty=0.5,
            change_promote=True,
            change_sim=0.4,
        ),
        Variant(
            "C5: C4 + short 0.2 + asking 0.5 + mix 0.5",
            cross_dense_weight=2.0,
            own_penalty=0.5,
            change_promote=True,
            change_sim=0.4,
            short_penalty=0.2,
            question_penalty=0.5,
            relevance_mix=0.5,
        ),
        Variant(
            "C6: C5 with cross 3.0",
            cross_dense_weight=3.0,
            own_penalty=0.5,
            change_promote=True,
            change_sim=0.4,
            short_penalty=0.2,
            question_penalty=0.5,
            relevance_mix=0.5,
        ),
        Variant(
            "C7: C5, own judged by terms only",
            cross_dense_weight=2.0,
            own_penalty=0.5,
            own_sparse_only=True,
            change_promote=True,
            change_sim=0.4,
            short_penalty=0.2,
            question_penalty=0.5,
            relevance_mix=0.5,
        ),
        Variant(
            "C8: C7 without mix (RRF order)",
            cross_dense_weight=2.0,
            own_penalty=0.5,
            own_sparse_only=True,
            change_promote=True,
            change_sim=0.4,
            short_penalty=0.2,
            question_penalty=0.5,
        ),
    ]

    # The probability of "the evidence turn" is small by construction (1-2 of ~600 turns);
    # the reported scale shifts the log-odds so 0.5 sits at P = 0.0018 (σ(z + 6.3)).
    def shifted(f: Features) -> Vec:
        p_ = cal(f)
        out: Vec = 1 / (1 + np.exp(-(np.log(p_ / (1 - p_)) + SHIFT)))
        return out

    allc = Prepared(lo.corpus, lo_queries, lo.feats)
    m_all = locomo_metrics(allc, run(allc, Variant("base"), None), line_tokens)
    print(
        f"reproduction on all 10 LoCoMo conversations: R@10 {m_all['R@10']:.3f} "
        f"B1000 {m_all['B1000']:.3f} (service over HTTP, bench/README.md: 0.757 / 0.845)"
    )
    c5 = next(x for x in combos if x.name.startswith("C5"))
    rows = []
    for v, cc in (
        [(x, cal) for x in variants + combos]
        + [
            (replace(x, name=x.name[:2] + " with σ(z + 6.3) in the mix"), shifted)
            for x in combos
            if x.relevance_mix
        ]
        + [
            (
                replace(
                    c5, name="C5σ, plain coverage (no IDF) in own + relevance", plain_coverage=True
                ),
                shifted3,
            ),
            (
                replace(
                    c5,
                    name="C5σ, plain coverage, change by stored chunk vectors",
                    plain_coverage=True,
                    change_by_chunk_vectors=True,
                ),
                shifted3,
            ),
            (
                replace(
                    c5, name="C5σ, change by stored chunk vectors", change_by_chunk_vectors=True
                ),
                shifted,
            ),
        ]
    ):
        lo_res = run(ev, v, cc)
        bi_res = run(bi, v, cc)
        ex_res = run(ex, v, cc)
        named_res = run(ex_named, v, cc)
        rows.append(
            {
                "variant": v.name,
                "params": {k: getattr(v, k) for k in v.__dataclass_fields__},
                "locomo_eval": locomo_metrics(ev, lo_res, line_tokens),
                "bilingual": bilingual_metrics(bi, bi_res),
                "readme_example_rank_of_fact": first_rank(ex_res["ana"][0], ["m1"]),
                "readme_example_rank_with_user_id_as_speaker": first_rank(
                    named_res["ana"][0], ["m1"]
                ),
            }
        )
        print(summary_line(rows[-1]))
    # Which reported relevance separates "nothing relevant" from evidence (issue b)?
    v = next(x for x in combos if x.name.startswith("C7"))
    calibrated: JSON = {}
    candidates: list[tuple[str, Calibrator | None]] = [
        ("rank-normalised RRF (today)", None),
        ("logistic, 4 features", cal),
        ("logistic, service-feasible", cal2),
        ("cosine of the turn alone", lambda f: f.cos_turn),
        ("σ(z + 6.3) of the 4-feature logistic", shifted),
        ("σ(z + 6.3), plain coverage", shifted3),
    ]
    for name, rel in candidates:
        calibrated[name] = relevance_study(bi, ev, v, rel)
        m = calibrated[name]
        print(
            f"relevance {name:30s} AUC(evidence vs no-match top) bilingual {m['auc']:.3f}; "
            f"t emptying 80%/90% of no-match {m['t80']:.4f}/{m['t90']:.4f} keeps evidence "
            f"bilingual {m['kept80']:.2f}/{m['kept90']:.2f}, LoCoMo {m['lo_kept80']:.2f}/"
            f"{m['lo_kept90']:.2f}"
        )
        for point in m["curve"]:
            print(
                f"    t {point['t']:.4f} empties {point['no_match_emptied']:.0%} of no-match; "
                f"R@10 bilingual {m['bilingual_R@10']:.3f} -> {point['bilingual_R@10_kept']:.3f}, "
                f"LoCoMo {m['locomo_R@10']:.3f} -> {point['locomo_R@10_kept']:.3f}"
            )
    thresholds: JSON = {}
    for name, rel in (("four features", shifted), ("plain coverage", shifted3)):
        thresholds[name] = min_relevance_table(bi, ev, c5, rel)
        print(f"min_relevance with the C5σ ranking, relevance σ(z + 6.3) from {name}:")
        for row in thresholds[name]:
            print(
                f"  {row['min_relevance']:.2f}: no-match empty {row['no_match_empty']:.2f}, "
                f"results left {row['no_match_results_in_top10']:.1f}; R@10 bilingual "
                f"{row['bilingual_R@10']:.3f}, LoCoMo {row['locomo_R@10']:.3f}"
            )
    write_json(
        args.out,
        {
            "calibration": {
                "weights": dict(zip([*FEATURES, "bias"], w.tolist(), strict=True)),
                "weights_service": dict(zip([*FEATURES_SERVICE, "bias"], w2.tolist(), strict=True)),
                "weights_plain": dict(zip([*FEATURES_PLAIN, "bias"], w3.tolist(), strict=True)),
                "fit_questions": len(fit.queries),
            },
            "reproduction_all_locomo": m_all,
            "min_relevance": thresholds,
            "rows": rows,
            "calibrated": calibrated,
        },
    )
    print(f"done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
