"""The recall pipeline's pieces that do no I/O: the typed search spec, the candidates that
stages hand on, the seams for a query rewriter and for stages after scoring, and the score
stage itself (docs/architecture.md §3).

A search runs `rewrite → retrieve → score → stages… → top_k` (`RecallService.search`);
docs/seams.md shows how to add a stage.
"""

from __future__ import annotations

import re
import sys
import uuid
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray
from pydantic import TypeAdapter

from app.core import ranking, relevance, scoring, terms
from app.core.memo import text_memo
from app.core.rewrite import Rewrite, Turn
from app.schemas.recall import RecallResult
from app.stores.vectors import CandidateLists, MemoryPayload, VectorHit

if TYPE_CHECKING:
    from app.schemas.recall import RecallRequest

RewriteMode = Literal["auto", "off"]


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """What one search asks for, built once (from a recall request, or by context)."""

    tenant_id: str
    user_id: str
    query: str
    top_k: int
    memory_types: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    metadata: Mapping[str, str | int | bool] = field(default_factory=dict)
    weights: scoring.Weights | None = None  # None: the service's defaults
    as_of: datetime | None = None  # "now" for decay; hides what was created after it
    # The session the query was asked in: where a rewrite finds the turns it refers to. It
    # does not narrow the search: a follow-up asked in a new session is answered from all
    # of the user's memories.
    session_id: str | None = None
    # Narrow to memories with a source in one of these sessions (recall's `session_ids`; the
    # index filters its `source_sessions`). None: every session.
    session_ids: tuple[str, ...] | None = None
    # Results whose calibrated relevance (`scores.semantic`) is below this are dropped
    # before `top_k` (`MinRelevance`); recall's default is `relevance.DEFAULT_MIN_RELEVANCE`.
    min_relevance: float = 0.0
    rewrite: RewriteMode = "auto"
    # The conversation a rewrite reads, when the caller has it already (context); None: the
    # rewriter reads `session_id`'s newest turns itself.
    turns: tuple[Turn, ...] | None = None
    # The seqs of `session_id`'s turns a rewrite read and built the query from: the caller
    # holds them (`HeldTurnsLast`). Set by the search, not the caller.
    held: frozenset[int] = frozenset()
    # The user named by their id is searched in the first person (`ranking.in_first_person`),
    # unless their turns carry that name (context: memories "Ana: …", searched by it).
    first_person: bool = True

    @classmethod
    def from_request(cls, tenant_id: str, body: RecallRequest) -> SearchSpec:
        weights = body.weights
        return cls(
            tenant_id=tenant_id,
            user_id=body.user_id,
            query=body.query,
            top_k=body.top_k,
            memory_types=tuple(body.memory_types) if body.memory_types else None,
            kinds=tuple(body.kinds) if body.kinds else None,
            created_from=body.time_range.from_ if body.time_range else None,
            created_to=body.time_range.to if body.time_range else None,
            metadata=body.metadata or {},
            weights=scoring.Weights(weights.semantic, weights.recency, weights.importance)
            if weights
            else None,
            as_of=body.as_of,
            session_id=body.session_id,
            session_ids=tuple(dict.fromkeys(body.session_ids)) if body.session_ids else None,
            min_relevance=body.min_relevance,
            rewrite=body.rewrite,
        )

    def created_until(self) -> datetime | None:
        """The upper bound on `created_at`: the time range's end, or `as_of` if earlier."""
        if self.as_of is None:
            return self.created_to
        return min(self.created_to, self.as_of) if self.created_to is not None else self.as_of

    def asks_about_a_period(self) -> bool:
        """A time range, or a date the query names ("in 2022"), asks about what was said
        then, not what holds now."""
        return (
            self.created_from is not None
            or self.created_to is not None
            or _named_period(self.query) is not None
        )


@dataclass(frozen=True, slots=True)
class Pool:
    """What retrieval found: the two candidate lists (dense and sparse, best first, with
    their cosines or stored vectors), the query's vector and index terms, and the user's highest
    access count (it normalises importance)."""

    lists: CandidateLists
    max_access: int
    query_vector: Sequence[float] = ()
    query_terms: frozenset[int] = frozenset()

    @classmethod
    def empty(cls) -> Pool:
        return cls(CandidateLists([], []), 0)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A scored hit. Stages may filter, reorder or re-score (`dataclasses.replace`) them;
    `score` (kept in [0, 1]) ranks the results, and it and the terms are what they report."""

    hit: VectorHit
    semantic: float
    recency: float
    importance: float
    score: float
    own: float = 1.0  # the share of the match that is the memory's own text (`own_match`)
    # The query's cosine with the memory's own turn (not its indexed, blended vector); None
    # when a stage was handed a candidate without it (tests).
    cosine: float | None = None


@dataclass(frozen=True, slots=True)
class Found:
    results: list[RecallResult]
    rewritten_query: str | None  # None: the query was searched as asked
    llm_usage: dict[str, int] | None = None  # tokens the rewrite's LLM call spent
    # The memories among the results that count as used (`reinforcement.counts_as_use`):
    # the ones a recall may reinforce.
    used: frozenset[uuid.UUID] = frozenset()


class Rewriter(Protocol):
    async def __call__(self, spec: SearchSpec, /) -> Rewrite | None:
        """A standalone form of `spec.query`, or None to search it as asked."""
        ...


async def no_rewrite(spec: SearchSpec, /) -> Rewrite | None:
    """Every query as asked (a service built without a rewriter, tests)."""
    return None


class Stage(Protocol):
    """A step after scoring: candidates in (best first), candidates out (best first).

    Async, because some will read stores (a graph boost); the pipeline cuts to `top_k`
    after the last stage, so each stage sees the whole scored pool.
    """

    async def __call__(
        self, spec: SearchSpec, candidates: list[Candidate], /
    ) -> list[Candidate]: ...


async def run_stages(
    spec: SearchSpec, candidates: list[Candidate], stages: Sequence[Stage]
) -> list[Candidate]:
    """Each stage in order over the whole scored pool, then the best `top_k`."""
    for stage in stages:
        candidates = await stage(spec, candidates)
    return candidates[: spec.top_k]


@dataclass(frozen=True, slots=True)
class ScoreConfig:
    """The settings scoring reads (app/settings.py; built in app/wiring.py)."""

    candidate_pool: int  # the fused candidates scored, at least
    rrf_k: int
    sparse_weight: float
    dense_weight: float
    dense_weight_cross_language: float
    relevance_weights: dict[str, float] | None  # a fitted calibration, else the bundled one
    cross_language_relevance: bool
    relevance_share: float
    answer_type_penalty: float
    named_period_penalty: float
    weight_semantic: float
    weight_recency: float
    weight_importance: float
    recency_lambda_per_day: float
    importance_intrinsic_share: float


@dataclass(frozen=True, slots=True)
class _Features:
    """What scoring reads of each candidate besides its cosines (one array entry each)."""

    cross: NDArray[np.bool_]  # in another language than the query
    asking: NDArray[np.bool_]  # `TextFacts.asks_only`
    filler: NDArray[np.bool_]
    lacks: NDArray[np.bool_]  # a when/where question, and it names no time/place
    lacks_number: NDArray[np.bool_]  # a question for a number, and it names none
    outside: NDArray[np.bool_]  # outside the period the query names
    index_terms: NDArray[np.float64]  # of its own text
    cov_own: NDArray[np.float64]
    cov_chunk: NDArray[np.float64]
    fused: NDArray[np.float64]  # its fused rank score, unnormalised
    age: NDArray[np.float64]  # seconds since last accessed (or created)
    intrinsic: NDArray[np.float64]
    access: NDArray[np.float64]

    @classmethod
    def empty(cls, n: int) -> _Features:
        flags = [np.zeros(n, dtype=bool) for _ in range(6)]
        return cls(*flags, *(np.empty(n) for _ in range(7)))


class Score:
    """The composite score (docs/architecture.md §3) over a pool, ranked best first (pure).

    Rank fusion in Python (weighted RRF, the dense weight per candidate by language), the
    penalties on the normalised fused score (`app.core.ranking`), the calibrated relevance
    (`app.core.relevance`, reported as `semantic`), then
    `score = α·key + β·recency + γ·importance` with `key = (1 − s)·fused + s·relevance`
    (`s` = `relevance_share`, ½).
    """

    def __init__(
        self,
        config: ScoreConfig,
        calibration: relevance.Calibration = relevance.PLAIN_COVERAGE,
        penalties: ranking.Penalties | None = None,
    ) -> None:
        self.config = config
        if config.relevance_weights is not None:
            calibration = relevance.fitted(config.relevance_weights)
        # Off, a cross-language pair is scored as any other (the map is then refitted
        # against such a server: bench/experiments/cross_language_fit.py).
        self.calibration = (
            calibration if config.cross_language_relevance else replace(calibration, cross=None)
        )
        self.penalties = penalties or ranking.Penalties(
            no_answer_type=config.answer_type_penalty,
            outside_period=config.named_period_penalty,
        )
        self.fusion = ranking.FusionWeights(
            k=config.rrf_k,
            sparse=config.sparse_weight,
            dense_same=config.dense_weight,
            dense_cross=config.dense_weight_cross_language,
        )

    def default_weights(self) -> scoring.Weights:
        s = self.config
        return scoring.Weights(s.weight_semantic, s.weight_recency, s.weight_importance)

    def __call__(self, spec: SearchSpec, pool: Pool) -> list[Candidate]:
        """The pool scored and ranked, each step over numpy arrays of the candidates (the
        formulas of `app.core.scoring`, `ranking` and `relevance`)."""
        now = spec.as_of or datetime.now(UTC)
        w = (spec.weights or self.default_weights()).normalised()
        hits = fused_pool(spec, pool, self.fusion, max(spec.top_k, self.config.candidate_pool))
        if not hits:
            return []
        chunk_cos, turn_cos = self._cosines(pool, hits)
        f = self._features(spec, pool, hits, now)
        pen, s = self.penalties, self.config
        short = f.index_terms <= pen.short_terms
        rel = self.calibration.many(
            turn_cos, chunk_cos, f.cov_own, f.cov_chunk, f.cross, short, f.asking, f.lacks
        )
        rel = np.where(f.filler, rel * (1.0 - pen.filler), rel)
        own = ranking.own_match_many(f.cov_own, f.cov_chunk, turn_cos, chunk_cos)
        factor = ranking.penalty_factor_many(
            own, f.index_terms, f.asking, pen, f.lacks | f.lacks_number, f.outside, f.filler
        )
        fused_norm = np.minimum(1.0, np.maximum(0.0, f.fused / self.fusion.best())) * factor
        key = (1 - s.relevance_share) * fused_norm + s.relevance_share * rel
        recency = scoring.recency_many(f.age, s.recency_lambda_per_day)
        importance = scoring.importance_many(
            f.intrinsic, f.access, pool.max_access, s.importance_intrinsic_share
        )
        score = scoring.combine_many(w, key, recency, importance)
        # Each array to floats at once (a numpy scalar read one by one costs ~0.1 us each).
        arrays = (rel, recency, importance, score, own, turn_cos)
        numbers = zip(*(a.tolist() for a in arrays), strict=True)
        candidates = [Candidate(hit, *row) for (hit, _), row in zip(hits, numbers, strict=True)]
        return sorted(candidates, key=lambda c: c.score, reverse=True)

    def _features(
        self, spec: SearchSpec, pool: Pool, hits: list[tuple[VectorHit, float]], now: datetime
    ) -> _Features:
        """What scoring reads of each candidate besides its cosines, as arrays."""
        n = len(hits)
        f = _Features.empty(n)
        # Always asked: the cross-language relevance reads `lacks` whatever the penalty.
        kind = _asks_for(spec.query)
        size = ranking.asks_size(spec.query)
        number = kind is None and (_asks_amount(spec.query) or size)
        period = self._period(spec)
        query_language = ranking.language(spec.query)
        for i, (hit, fused) in enumerate(hits):
            p = hit.payload
            facts = text_facts(p.content, p.role)
            f.cross[i] = ranking.cross_language(query_language, facts.language)
            f.index_terms[i] = facts.own_terms
            f.asking[i] = facts.asks_only(self.penalties.asking_terms)
            f.filler[i] = facts.filler
            if kind is not None:
                f.lacks[i] = not names_of(p.content, p.role, kind) and (
                    # In lowercase chat a place goes unseen ("fairmont waterfront, 3
                    # nights"): such a turn is not known to lack one.
                    kind != "place" or ranking.shows_case(MemoryPayload.text_of(p.content, p.role))
                )
            if number:  # loose: a number in words is one ("we have twins", 三个孩子)
                f.lacks_number[i] = not may_tell_of(p.content, p.role, False, True, size)
            if period is not None and p.kind != "summary":  # a summary spans its period
                f.outside[i] = not period[0] <= p.created_at < period[1]
            chunk_terms = hit.vectors.sparse_ids if hit.vectors else ()
            f.cov_own[i], f.cov_chunk[i] = relevance.coverages(
                pool.query_terms, facts.terms, chunk_terms
            )
            f.fused[i] = fused
            f.age[i] = (now - (p.last_accessed_at or p.created_at)).total_seconds()
            f.intrinsic[i] = 1.0 if p.pinned else p.importance
            f.access[i] = p.access_count
        return f

    def _period(self, spec: SearchSpec) -> tuple[datetime, datetime] | None:
        """The period the query names, unless the request set its own `time_range`."""
        if not self.penalties.outside_period or spec.created_from or spec.created_to:
            return None
        return _named_period(spec.query)

    @staticmethod
    def _cosines(
        pool: Pool, hits: list[tuple[VectorHit, float]]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Each candidate's (indexed vector, own turn vector) cosine with the query: as the
        index computed them (`VectorHit.cosines`), else from its stored vectors."""
        n = len(hits)
        chunk, turn = np.empty(n), np.empty(n)
        rest = []
        for i, (h, _) in enumerate(hits):
            if h.cosines is None:
                rest.append(i)
            else:
                chunk[i], turn[i] = h.cosines
        if rest:
            q = _unit_rows(np.asarray([pool.query_vector], dtype=np.float32))[0]
            stored = [hits[i][0].vectors for i in rest]
            dim = len(q)
            chunk[rest] = _unit_rows(_stack([v.dense if v else [] for v in stored], dim)) @ q
            turn[rest] = _unit_rows(_stack([v.turn if v else [] for v in stored], dim)) @ q
        return chunk, turn


def fused_pool(
    spec: SearchSpec, pool: Pool, fusion: ranking.FusionWeights, limit: int
) -> list[tuple[VectorHit, float]]:
    """The two lists fused (weighted RRF, each dense rank weighted by the candidate's
    language against the query's), the best `limit` with their fused scores. Keyed by each
    id's `int`: a `uuid.UUID` hashes in Python (~300 of them here)."""
    query_language = ranking.language(spec.query)
    by_id = {h.id.int: h for h in (*pool.lists.dense, *pool.lists.sparse)}
    dense = [
        (
            h.id.int,
            fusion.dense_for(
                query_language, text_facts(h.payload.content, h.payload.role).language
            ),
        )
        for h in pool.lists.dense
    ]
    fused = ranking.fuse(dense, [h.id.int for h in pool.lists.sparse], fusion)
    best = sorted(fused.items(), key=lambda kv: kv[1], reverse=True)[:limit]
    return [(by_id[key], score) for key, score in best]


# What scoring keeps of the texts it has seen (app/core/memo.py): ~70,000 LoCoMo-length
# turns, ~10,000 of LongMemEval's long assistant turns.
TEXT_FACTS_BYTES = 64 << 20
NAMES_BYTES = 16 << 20  # its texts are mostly `text_facts`' keys too (counted again, to be safe)
# What scoring and the stages ask of the question itself, each ~3 times a recall (~3% of
# its CPU): once per question text.
QUESTION_BYTES = 1 << 20
_named_period = text_memo(QUESTION_BYTES)(ranking.named_period)
_asks_for = text_memo(QUESTION_BYTES)(ranking.asks_for)
_asks_amount = text_memo(QUESTION_BYTES)(ranking.asks_amount)
_subjects = text_memo(QUESTION_BYTES)(ranking.subjects)


@dataclass(frozen=True, slots=True)
class TextFacts:
    """What scoring needs of a memory's text, none of it depending on the query or a setting.

    `terms` are a packed array of distinct ids, not a frozenset of Python ints: ~0.7 kB an
    entry against ~2.4 kB (bench/HISTORY.md, "scoring's text cache"); `relevance.coverage`
    intersects the query's term set with them."""

    terms: array[int]  # the index terms of the content ("speaker: text")
    own_terms: int  # the index terms of its own text, without "speaker: "
    # An assistant turn ending in "?", or a user's asking to be reminded of something of
    # their own (`ranking.reminds`): its terms; else None.
    question_terms: int | None
    language: ranking.Language
    states_change: bool
    filler: bool = False  # `ranking.filler`: a reaction that states nothing
    # `ranking.subjects`: the people and pets it is about (most texts: the shared empty set)
    subjects: frozenset[str] = frozenset()
    adds: bool = False  # `ranking.adds_to`: says it comes in addition ("also", 又)
    current: bool = False  # `ranking.states_current`: says how things stand now (now, 现在)

    def asks_only(self, max_terms: int) -> bool:
        """`ranking.asks_only`: an assistant turn that is a short question, or a user's short
        question about themself that tells nothing ("Where do I live again?")."""
        return self.question_terms is not None and self.question_terms <= max_terms


@text_memo(TEXT_FACTS_BYTES, entry_bytes=400, value_bytes=lambda f: sys.getsizeof(f.terms))
def text_facts(content: str, role: str | None) -> TextFacts:
    """A memory's `TextFacts`, once per text: tokenizing is the costliest step of scoring,
    and a user's memories come back again and again. One memo for all of them (one lookup
    a candidate), bounded by the bytes of its texts and arrays, not by a count: 100,000
    entries of long turns held ~360 MiB."""
    text = MemoryPayload.text_of(content, role)
    # One tokenization, not three (a first-seen candidate's facts were ~90 us, most of a
    # cold recall's tail): `text` is `content` after "speaker: ", and no term spans that
    # ": " (tests/unit/test_search.py holds the split to tokenizing the whole); stripping
    # whitespace changes no term, so a question's terms are its text's.
    own = terms.tokenize(text)
    tokens = own if text is content else terms.tokenize(content[: len(content) - len(text)]) + own
    own_terms = len(own)
    question = (role == "assistant" and text.strip().endswith(("?", "？"))) or ranking.reminds(
        role, text
    )
    return TextFacts(
        terms=array("L", sorted({terms.term_id(t) for t in tokens})),
        own_terms=own_terms,
        question_terms=own_terms if question else None,
        language=ranking.language(text),
        states_change=ranking.states_change(text),
        filler=ranking.filler(role, text),
        subjects=ranking.subjects(text),
        adds=ranking.adds_to(text),
        current=ranking.states_current(text),
    )


@text_memo(NAMES_BYTES)
def names_of(content: str, role: str | None, kind: ranking.AnswerType) -> bool:
    """`ranking.names` of a memory's own text, once per text and kind (like `text_facts`)."""
    return ranking.names(MemoryPayload.text_of(content, role), kind)


@text_memo(NAMES_BYTES)
def may_tell_of(
    content: str, role: str | None, time: bool, amount: bool, size: bool = False
) -> bool:
    """`ranking.may_tell` of a memory's own text, once per text (like `names_of`): a number
    question asks it of every candidate."""
    text = MemoryPayload.text_of(content, role)
    return ranking.may_tell(text, time=time, amount=amount, size=size)


def _stack(rows: Sequence[Sequence[float] | NDArray[np.float32]], dim: int) -> NDArray[np.float32]:
    """The rows as a matrix; a row that is missing (or of another size) is zeros: cosine 0."""
    out = np.zeros((len(rows), dim), dtype=np.float32)
    for i, r in enumerate(rows):
        if len(r) == dim:
            out[i] = r
    return out


def _unit_rows(m: NDArray[np.float32]) -> NDArray[np.float32]:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    out: NDArray[np.float32] = m / np.maximum(norms, 1e-12)
    return out


@dataclass(frozen=True, slots=True)
class MinRelevance:
    """Drops memories that are not about the query at all (`min_relevance`), before `top_k`.

    Summaries are kept: the relevance is calibrated on single turns, and a summary is asked
    for by its period ("what happened last week?", `kinds: [summary]` with a `time_range`),
    which a turn-level relevance does not measure."""

    # Below this multiple of the floor, a turn that states nothing of the user's goes too
    # (`_states_nothing`): the assistant's, or the user's asking it for something ("小米粥
    # 怎么煮才黏糊", 0.106, for 我的车险哪天到期). The answers that low are the user's own
    # statements in other words ("I moved to Lisbon." for "Where do I live?", 0.13).
    aside: float = 2.0

    async def __call__(self, spec: SearchSpec, candidates: list[Candidate], /) -> list[Candidate]:
        if spec.min_relevance <= 0:
            return candidates
        # A question about what the assistant said is answered by its turns; a query of
        # keywords ("cooking conversions"; not "my shoe size") asks nothing of the user's.
        asks = (
            ranking.ends_asking(spec.query) or ranking.asks_about_user(spec.query)
        ) and not ranking.asks_assistant(spec.query)
        aside = (self.aside if asks else 1.0) * spec.min_relevance
        kept = [
            c
            for c in candidates
            if c.hit.payload.kind == "summary"
            or c.semantic >= aside
            or (c.semantic >= spec.min_relevance and not _states_nothing(c.hit.payload))
        ]
        if _never_told(spec, kept) or _told_of_others(spec, kept, candidates):
            return []
        return kept


def _states_nothing(p: MemoryPayload) -> bool:
    """Is the memory a turn that states nothing of the user's: the assistant's, or one
    that asks and tells nothing before it ("how do i get red wine out of carpet"; not
    "i'm on lisinopril, is it ok to take ibuprofen?")? A derived fact states; so does a
    named speaker in the assistant's role (an import's second person, "Melanie: …")."""
    if p.role == "assistant" and p.content.startswith("assistant: "):
        return True
    if p.role not in ("user", "assistant"):
        return False
    text = MemoryPayload.text_of(p.content, p.role)
    return ranking.ends_asking(text) and not ranking.tells_then_asks(text)


def _never_told(spec: SearchSpec, results: list[Candidate]) -> bool:
    """Does the question ask for a time or a number that none of the memories above the
    floor (the whole pool's, so that `top_k` does not change the answer) could tell?
    Then what it asks was never said, however close the topic: "when is my husband's
    birthday?" over "gift ideas for my husband?" (relevance 0.93), 我家猫几岁了 over 我家
    猫最近掉毛厉害 (0.99), which no floor on relevance tells apart from an answer. Not for
    a name, a place or "who": those are often told in words no test sees ("nah my
    roommate's grabbing me", "carmine's on 5th"). Applies with a floor only (a recall with
    `min_relevance` 0, and the context's, keep their results), and not over summaries."""
    if not results or any(c.hit.payload.kind == "summary" for c in results):
        return False
    kind = _asks_for(spec.query)
    if kind == "place":  # "那几件衣服是在哪买的？" asks where, not how many
        return False
    time = kind == "time"
    # How long and how often are told in numbers too ("took me 140 hours"), and 几号 asks
    # for a date or a number (停车位是几号 over "B14").
    size = ranking.asks_size(spec.query)  # "what size shoe does dad wear": "a 10.5", "queen"
    amount = (
        _asks_amount(spec.query)
        or size
        or ranking.time_asked(spec.query) in ("duration", "often")
        or "几号" in spec.query
    )
    if not (time or amount) or ranking.asks_name(spec.query) or ranking.asks_who(spec.query):
        return False
    return not any(
        may_tell_of(c.hit.payload.content, c.hit.payload.role, time, amount, size) for c in results
    )


def _told_of_others(spec: SearchSpec, results: list[Candidate], pool: list[Candidate]) -> bool:
    """Does the question ask about someone of the user's (my son, 我家猫, dad) whom none
    of the memories above the floor speaks of, each speaking of someone else? "when is my
    son's recital?" over "my daughter's piano recital is may 18" and its thread ("terrified
    lol. practicing every night"), 我爸吃的是什么药 over 我妈's pills: what it asks was never
    said, however close the topic (relevance 0.93). A memory that names no one is about
    whom its thread's last turn that names someone is about (`_thread_speaks_of_others`);
    one whose thread is not in the pool, or that is the user's own news ("got a dentist
    appt on the 9th"), may be about them, and keeps every result. Not for advice ("what
    should I get my dad?": what was said of mom may help), and with a floor only."""
    asked = ranking.asked_about(spec.query)
    if not asked or not results or ranking.asks_advice(spec.query):
        return False
    if any(c.hit.payload.kind == "summary" for c in results):
        return False
    by_place = {at: c for c in pool if (at := _place(c.hit.payload)) is not None}
    return all(_thread_speaks_of_others(asked, c, by_place) for c in results)


def _thread_speaks_of_others(
    asked: frozenset[str], c: Candidate, by_place: dict[tuple[str, int], Candidate]
) -> bool:
    """`ranking.speaks_of_others` of the memory, or, when it names no one, of the nearest
    turn before it in its session that does (up to four back, all in the pool), with the
    pronouns of the turns between ("好的 我给她买了个血压计" after 我妈血压有点高: mom's;
    "i booked it for him" after "my daughter's recital…": maybe not hers)."""
    payload = c.hit.payload
    at = _place(payload)
    between: list[str] = []
    for back in range(5):
        if back:
            prior = by_place.get((at[0], at[1] - back)) if at is not None else None
            if prior is None:
                return False
            payload = prior.hit.payload
        text = MemoryPayload.text_of(payload.content, payload.role)
        if ranking.names_unclassed(text):
            return False  # "and now the little guy has a fever too": maybe the son
        if ranking.mentioned(text):
            return bool(ranking.speaks_of_others(asked, " ".join([text, *between])))
        if ranking.someone_else_too(text):
            return False  # "and now leo has it too ugh": someone new, whom no class holds
        if ranking.subjects(text) == frozenset((ranking.SELF,)) and not ranking.has_pronoun(text):
            return False  # the user's own news ("i need to book a dentist appt"): may be theirs
        between.append(text)
    return False


@dataclass(frozen=True, slots=True)
class UserWordsFirst:
    """For a question about the user or their world (first person, "when do i usually work
    out?", 我早上一般喝点啥？, or naming no speaker of the results, "whats his number?", 他吃
    的那个降压药叫啥来着), a user turn goes just above the assistant's reply to it when
    the reply ranked higher and the turn is itself relevant (≥ `confident`) and not about
    someone else than the question (`ranking.about_others`: "又领养了一只小狗" for 我家猫叫
    啥名字？). A reply's
    indexed vector holds the turn before it (docs/architecture.md §3), so "Nice work!
    Evening sessions can feel stronger too." (0.95) came above "just back from the gym,
    tues and thurs evenings after my shift is the routine lately" (0.70), the user's own
    words. Left as ranked: a reply that names a number or a name the turn does not
    (`ranking.adds_specifics`: "太平洋那款的等待期是九十天" after "我还给我爸妈各买了一份
    重疾险"), a turn more than `within` places below its reply, a question about what the
    assistant said ("what did you
    recommend?", 你推荐的…), a turn that ends asking ("I'm going to Rome, what should
    I see?"), whose reply is the answer, and a question that names a speaker of the results
    (LoCoMo's "What did Melanie paint?", whose second speaker is the `assistant`).

    Likewise the user's answer goes just above the assistant's question it answers (the
    turn before it): "后端接口" above "时间挺紧的，你负责哪块？" for 我在项目里负责什么; not a
    reaction ("要", "haha yeah"), nor a yes or a no ("对，主要想吃火锅"): what it agrees to
    is in the question. And the user's next turn goes just above the user's
    turn that brought its topic up, when it tells the details (`_tells_more`): "thurs
    7ish" above "need to set a reminder for the dentist" for "what time is my dentist
    appointment?"."""

    confident: float = relevance.CONFIDENT_RELEVANCE
    # How far below its reply the turn may be: further down, moving it pushes every result
    # between them down a place (followups.py's 她的生日是七月九号 fell out of the top 5).
    within: int = 3
    # The user's answer to the assistant's question goes above it from this share of its
    # relevance: "她的生日是七月九号，我想提前准备礼物" (0.44) answers "要给她准备什么吗？"
    # (0.86) in part, and moving it pushed "她…周末还教小朋友弹钢琴" (0.89) out of the top 5
    # for 玛丽亚周末都做些什么？ (followups.py).
    answer_relevance: float = 0.7
    # The details (`_tells_more`) from this relevance: they share few words with the
    # question ("200 bucks, ugh", 0.19, for 房租要涨多少？), which the turn before holds.
    detail_relevance: float = 0.1
    # The share of the opener's relevance the details hold at least.
    inherits: float = 0.5
    # How far the question's cosines with the assistant's question and the user's reply to
    # it, summed, pass its cosine with the opener (`_asked_alike`).
    asked_alike: float = 0.17
    # The assistant's answer goes above the user's request it answers from this share of
    # the request's relevance (`_replies_first`: "Benign means not cancerous.", 0.5, for
    # "what does benign mean" over "what did the doctor mean by 'benign'?", 1.0).
    reply_share: float = 0.5

    async def __call__(self, spec: SearchSpec, candidates: list[Candidate], /) -> list[Candidate]:
        if len(candidates) < 2:
            return candidates
        if ranking.asks_assistant(spec.query):
            if not _ASKED_BY_USER.search(spec.query):
                candidates = _replies_first(candidates, self.within, self.reply_share)
            return candidates
        if not ranking.asks_about_user(spec.query) and _names_a_speaker(spec.query, candidates):
            return candidates
        asked = _subjects(spec.query) - {ranking.SELF}
        question = _Question.of(spec.query)
        places = {
            at: n
            for n, c in enumerate(candidates)
            if c.hit.payload.role == "user" and (at := _place(c.hit.payload)) is not None
        }
        if not places:
            return candidates
        order = list(range(len(candidates)))
        for n, c in enumerate(candidates):
            p = c.hit.payload
            at = _place(p) if p.role == "assistant" else None
            if at is None:
                continue
            reply = MemoryPayload.text_of(p.content, p.role)
            for u in (places.get((at[0], at[1] - 1)), places.get((at[0], at[1] + 1))):
                if u is None or u < n or order.index(u) - order.index(n) > self.within:
                    continue
                answers = _place(candidates[u].hit.payload) == (at[0], at[1] + 1)
                if self._stays_below(candidates[u], c, reply, question, answers=answers):
                    continue
                order.remove(u)
                order.insert(order.index(n), u)
        replies = {
            at: c
            for c in candidates
            if c.hit.payload.role == "assistant" and (at := _place(c.hit.payload)) is not None
        }
        out = list(candidates)
        for n, c in enumerate(candidates):
            at = _place(c.hit.payload) if c.hit.payload.role == "user" else None
            if at is None:
                continue
            # The user's next turn, or the one after it when the assistant asked before it
            # ("How often do you see him?" / "every other saturday, 45 min", two exchanges
            # after "started guitar lessons finally!!").
            for step in (2, 4):
                u = places.get((at[0], at[1] + step))
                if u is None or order.index(u) < order.index(n):
                    continue
                between = replies.get((at[0], at[1] + step - 1))
                if order.index(u) - order.index(n) <= self.within and self._tells_more(
                    candidates[u], c, between, question, asked, further=step > 2
                ):
                    order.remove(u)
                    order.insert(order.index(n), u)
                    # It answers what the opener was relevant for, in fewer of its words
                    # ("200 bucks, ugh", 0.19): the relevance floor must not drop it.
                    out[u] = _not_below(out[u], c, self.inherits, spec.min_relevance)
                    break
        return [out[n] for n in order]

    def _stays_below(
        self, turn: Candidate, c: Candidate, reply: str, question: _Question, *, answers: bool
    ) -> bool:
        """Does the user's `turn` stay below the assistant's reply `c` (the turn it drew, or,
        with `answers`, the question it answers)? A turn that tells, then asks ("i'm on
        lisinopril for blood pressure, is it ok to take ibuprofen?") holds the user's own
        fact, which a question about the user's world asks for, not advice ("what should I
        see in Rome?"): its reply is the answer only to the question it asked."""
        text = MemoryPayload.text_of(turn.hit.payload.content, "user")
        told_first = (
            not answers
            and ranking.asks_about_user(question.query)
            and not ranking.asks_advice(question.query)
            and ranking.tells_then_asks(text)
        )
        if (
            turn.semantic < self.confident
            or (ranking.ends_asking(text) and not told_first)
            or ranking.about_others(question.others, ranking.subjects(text) - {ranking.SELF})
        ):
            return True
        if not answers:
            return _reply_tells_more(reply, text, question)
        return (
            text_facts(turn.hit.payload.content, "user").filler
            or not ranking.ends_asking(reply)
            or (ranking.affirms(text) and not ranking.adds_specifics(text, reply))
            or turn.semantic < self.answer_relevance * c.semantic
        )

    def _tells_more(
        self,
        turn: Candidate,
        opener: Candidate,
        between: Candidate | None,
        question: _Question,
        asked: frozenset[str],
        *,
        further: bool = False,
    ) -> bool:
        """Is `turn`, the user's next turn after `opener` (the assistant's between), the
        detail the question asks for, which the opener brought up without it? "thurs 7ish"
        after "need to set a reminder for the dentist" (and "what time?") for "what time is
        my dentist appointment?", "yeah $240 parts and labor" after "took the civic in
        today …" for "how much did the brake job run me?": the question asks for a time, an
        amount or a name, the turn names one and the opener none ("小林生日是6月18号"
        keeps its place above "提前三天就行"). Or, whatever it asks, a turn that holds
        a word of the question the opener lacks ("we meet at lena's place" after "our
        book club is doing …" for "where does book club meet"). Or anything after an
        opener that only asks.
        A detail the question does not ask for stays below ("she just turned 12" after "my
        daughter got into the robotics club" for "what activity did she join?")."""
        kind, amount, name = question.kind, question.amount, question.name
        text = MemoryPayload.text_of(turn.hit.payload.content, "user")
        said = MemoryPayload.text_of(opener.hit.payload.content, "user")
        mine = ranking.subjects(text) - {ranking.SELF}
        if (
            turn.semantic < self.detail_relevance
            or ranking.ends_asking(text)
            or ranking.adds_to(text)  # "also my car insurance went up to 120 a month"
            or text_facts(turn.hit.payload.content, "user").filler
            or ranking.about_others(asked, mine)
            # "my son's soccer is tuesdays at 5" after "my daughter wants piano lessons"
            or ranking.about_others(ranking.subjects(said) - {ranking.SELF}, mine)
        ):
            return False
        if between is not None and _asks_about_another(question, between):
            return False
        answered = _opener_answers(question, said, text)
        if (
            not answered
            and between is not None
            and self._asked_alike(turn, opener, between, question)
        ):
            return True
        if further or answered:  # two exchanges on: only as the answer to what it asked
            return False
        if question.words & _words(text) - _words(said):  # what is asked of the topic
            return True
        if ranking.asks_plainly(said):
            # Its own words carry the topic: a reply that shares few is a new one ("燕麦她
            # 不爱吃，我试试别的" after "我妈血糖有点高，有什么适合她吃的早餐吗？").
            return turn.semantic >= self.confident
        # A place only in Chinese: in lowercase English chat a place is seldom capitalised
        # ("visiting from toronto"), so a first turn that names one would pass for one that
        # does not. A place the question names is no answer to it (杭州 in 我杭州出差订的
        # 哪个酒店, after "下周要去杭州出差").
        if kind == "place":
            return (
                ranking.language(said) == "zh"
                and not mine  # "我同事上次去住的是平江路的全季": a colleague's hotel
                and ranking.names(text, "place")
                and not _names_place_asked(_without_words(said, question.words), question)
            )
        if ranking.asks_level(question.query):
            return ranking.names_level(text) and not ranking.names_level(said)
        if kind == "time":
            return _told_when(question, text) and not _told_when(question, said)
        if amount:
            return ranking.names_amount(text) and not ranking.names_amount(said)
        return (name or question.who) and ranking.names_name(text) and not ranking.names_name(said)

    def _asked_alike(
        self,
        turn: Candidate,
        opener: Candidate,
        between: Candidate,
        question: _Question,
    ) -> bool:
        """Did the assistant ask, between the opener and `turn`, what the question asks,
        and `turn` answer it (not a bare yes or no, not "not sure yet")? Its last sentence
        asks about someone the question asks about (or the user), and either shares a
        word with the question that the opener lacks, or asks for the same kind of answer
        (a time, a place, a number) that the opener does not give ("How much do you have
        so far?" / "about 22k sitting in the HYSA"), or the question's cosines with the
        assistant's question and with the reply, summed, pass its cosine with the opener
        by `asked_alike` (own turn vectors: "Aww! What color is she?" / "grey with white
        paws" for "what does mochi look like?"): the opener holds the topic's words, the
        question and its answer the rest."""
        whole = MemoryPayload.text_of(between.hit.payload.content, "assistant")
        asks = ranking.asked_in(whole)
        if asks is None:
            return False
        text = MemoryPayload.text_of(turn.hit.payload.content, "user")
        said = MemoryPayload.text_of(opener.hit.payload.content, "user")
        # A word of the question that the assistant's question holds and the opener does
        # not: "Do you know his size and which color he'd like?" for "what size shoe does
        # dad wear", after "looking at those allbirds tree runners for my dad's birthday".
        shared = bool((question.words & _words(asks)) - _words(said))
        # Of the same kind is not of the same thing when the opener has one of that kind
        # already: "What time are you leaving for the airport?" / "probably 4:45" after
        # "flying to denver tomorrow at 6:40am"; unless they share a word ("How much do you
        # have so far?" for "how much have we saved … so far"). A name only with a shared
        # word: "Who recommended her?" asks another who than "who's my dentist". A place
        # the opener names in lowercase goes unseen ("going to lisbon in may!" then "Where
        # are you staying?"): kept, as replies to "在哪？" answer more often (everyday4, 7).
        if not shared and question.has_one(said):
            # "要几点出门？" / "五点半吧" after "明天早上7点的高铁" for 我明天高铁几点
            return False
        same_kind = (
            shared
            or (
                question.kind is not None
                and ranking.asks_for(asks) == question.kind
                and not _other_times(question.query, asks)
            )
            or (question.amount and ranking.asks_amount(asks))
            or (ranking.asks_level(question.query) and ranking.asks_level(asks))
            or _asks_the_same_thing_across(question, asks)
        )
        if (
            same_kind
            and not ranking.undecided(text)
            and not (ranking.affirms(text) and not ranking.adds_specifics(text, asks))
        ):
            return True
        q_turn, q_opener, q_asked = turn.cosine, opener.cosine, between.cosine
        if q_turn is None or q_opener is None or q_asked is None:
            return False
        return q_asked + q_turn - q_opener >= self.asked_alike


@dataclass(frozen=True, slots=True)
class _Question:
    """What a question asks for, as `UserWordsFirst`'s details and `NewerFactsFirst`'s
    thread read it."""

    query: str
    kind: ranking.AnswerType | None  # a time or a place
    amount: bool
    name: bool
    who: bool
    # `_words`, without the words that ask (time, much, 几点 …) and those for a person or
    # a pet (dog, 狗狗: "How old is your dog?" asks no more about the dog's food).
    words: frozenset[str]
    others: frozenset[str]  # whom it asks about besides the user (`ranking.subjects`)

    @classmethod
    def of(cls, query: str) -> _Question:
        return cls(
            query,
            _asks_for(query),
            _asks_amount(query),
            ranking.asks_name(query),
            ranking.asks_who(query),
            frozenset(w for w in _words(query) - _ASKING_WORDS if not ranking.names_someone(w)),
            _subjects(query) - {ranking.SELF},
        )

    def has_one(self, said: str) -> bool:
        """Does the text name one of what the question asks for (a clock time for "what
        time", a day for "which day", a place, a number, a name)? In lowercase chat a place
        is seldom seen ("going to lisbon in may!"), a name neither."""
        if self.kind == "place" and ranking.names(said, "place"):
            return True
        if self.kind == "time":
            asked = ranking.time_asked(self.query)
            if asked == "clock" and ranking.names_clock(said):
                return True
            if asked != "clock" and ranking.names(said, "time"):
                return True
        if self.amount and ranking.names_amount(said):
            return True
        return (self.name or self.who) and ranking.names_name(said)

    def answered_by(self, payload: MemoryPayload) -> bool:
        """Does the memory name what the question asks for (a time, a place, a number), or
        does the question ask for none of those? Not a name: in lowercase chat a name is
        seldom capitalised ("we see dr nakamura now")."""
        if self.kind is not None and not names_of(payload.content, payload.role, self.kind):
            return False
        return not self.amount or ranking.names_amount(
            MemoryPayload.text_of(payload.content, payload.role)
        )


def _opener_answers(question: _Question, said: str, text: str) -> bool:
    """Does the opener (`said`) name what the question asks for and the next turn (`text`)
    not ("lent marcus $400 …" for "how much does marcus owe me"; "我老公在华为上班" then
    "他每天加班到很晚，工作太累了" for 我老公在哪里工作, a place only in Chinese, whose
    places the patterns see)? Then the next turn goes on about something else."""
    if question.kind == "time" and _told_when(question, said) and not _told_when(question, text):
        return True
    if (
        question.kind == "place"
        and ranking.language(said) == "zh"
        and _names_place_asked(_without_words(said, question.words), question)
        and not _names_place_asked(text, question)
    ):
        return True
    if question.amount and ranking.names_amount(said) and not ranking.names_amount(text):
        return True
    return bool(
        (question.name or question.who)
        and ranking.names_name(said)
        and not ranking.names_name(text)
    )


# "what did i ask you to help write": what the user asked, not what the assistant said.
_ASKED_BY_USER = re.compile(r"\b(?:i|we)\s+(?:ask|asked|tell|told)\s+(?:you|u)\b|我(?:问|让|叫)你")


def _replies_first(candidates: list[Candidate], within: int, share: float) -> list[Candidate]:
    """For a question about what the assistant said ("what book did you recommend"), the
    assistant's reply goes just above the user's request it answers ("can you recommend a
    good sci-fi book"), when
    it is at most `within` places below and at least `share` as relevant: the request holds
    the topic's words, the reply the answer. Only the assistant's own turns (not an
    import's named speaker) and only a request that tells nothing first ("i'm on
    lisinopril for blood pressure, is it ok …" holds the user's fact)."""
    replies = {
        at: n
        for n, c in enumerate(candidates)
        if c.hit.payload.content.startswith("assistant: ")
        and (at := _place(c.hit.payload)) is not None
    }
    if not replies:
        return candidates
    order = list(range(len(candidates)))
    for n, c in enumerate(candidates):
        p = c.hit.payload
        at = _place(p) if p.role == "user" else None
        r = replies.get((at[0], at[1] + 1)) if at is not None else None
        if r is None or r < n or order.index(r) - order.index(n) > within:
            continue
        text = MemoryPayload.text_of(p.content, "user")
        if not ranking.ends_asking(text) or ranking.tells_then_asks(text):
            continue
        if candidates[r].semantic >= share * c.semantic:
            order.remove(r)
            order.insert(order.index(n), r)
    return [candidates[k] for k in order]


def _not_below(moved: Candidate, over: Candidate, share: float, floor: float) -> Candidate:
    """`moved`, put above `over` as what answers in its place, with at least `share` of
    its relevance, and never under the relevance floor (`floor`, the request's
    `min_relevance`, up to the default) when `over` passes it: the floor must not keep the
    turn it was put above and drop the answer."""
    least = share * over.semantic
    # Up to the default floor only: a caller's stricter one is theirs to apply.
    floor = min(floor, relevance.DEFAULT_MIN_RELEVANCE)
    if over.semantic >= floor > 0:
        least = max(least, floor)
    if moved.semantic >= least:
        return moved
    return replace(moved, semantic=least)


def _asks_about_another(question: _Question, between: Candidate) -> bool:
    """Does the assistant's turn between the opener and the reply ask about someone else
    than the question? "How old is your son?" for "how old is my daughter"; "那你呢？在哪
    上班？" (the user) for 我老公在哪上班: the reply is about them."""
    asks = MemoryPayload.text_of(between.hit.payload.content, "assistant")
    theirs = ranking.subjects(asks) - {ranking.SELF}
    return ranking.about_others(question.others, theirs) or bool(
        question.others and not theirs and ranking.addressed_to_you(asks)
    )


def _reply_tells_more(reply: str, turn: str, question: _Question) -> bool:
    """Does the assistant's reply name a number or a name the user's turn does not
    (`ranking.adds_specifics`: "太平洋那款的等待期是九十天" answers by itself), other than
    beside the time asked, which the turn tells and the reply does not ("睡七个半小时左右"
    after "最近每天11点睡，6点半起" for 我平时几点起床)?"""
    if not ranking.adds_specifics(reply, turn):
        return False
    return not (
        question.kind == "time" and _told_when(question, turn) and not _told_when(question, reply)
    )


def _asks_the_same_thing_across(question: _Question, asks: str) -> bool:
    """Across languages no word is shared: "哪款？" asks what "what robot vacuum did i
    buy" asks, "Which couch is it?" what 我家沙发是哪个牌子的 asks, when both ask for a
    thing by what it is (`ranking.asks_which`) and neither for a time, a place, a number or
    a name ("What's the email about?" asks nothing 老师姓什么 does)."""
    if question.kind is not None or question.amount or question.name or question.who:
        return False
    if not ranking.cross_language(ranking.language(question.query), ranking.language(asks)):
        return False
    return (
        ranking.asks_which(question.query)
        and ranking.asks_which(asks)
        and ranking.asks_for(asks) is None
        and not ranking.asks_amount(asks)
    )


def _names_place_asked(text: str, question: _Question) -> bool:
    """Does the text name a place of the kind the question asks: for a venue (哪个酒店, 哪家
    火锅) one at that level ("下周要去杭州出差" names a city, no hotel), else any place?"""
    if ranking.asks_venue_zh(question.query) and ranking.has_cjk(text):
        return ranking.names_venue_zh(text)
    return ranking.names(text, "place")


def _without_words(text: str, words: frozenset[str]) -> str:
    """The text with each of the (Chinese) words taken out."""
    for w in sorted(words, key=len, reverse=True):
        if ranking.has_cjk(w):
            text = text.replace(w, " ")
    return text


def _told_when(question: _Question, text: str) -> bool:
    """Does the text tell the time the question asks for: a clock time for "what time"
    ("got an interview next week!!" does not, "thursday at 2pm" does), how often for "how
    often" ("every other week"), else a day or a date (not only 最近)?"""
    asked = ranking.time_asked(question.query)
    if asked == "clock":
        return ranking.names_clock(text)
    if asked == "often":
        return ranking.names_often(text)
    return ranking.names_day(text)


def _other_times(a: str, b: str) -> bool:
    """Do the two questions ask for different times (a day and a clock time)?"""
    x, y = ranking.time_asked(a), ranking.time_asked(b)
    return x is not None and y is not None and x != y


def _words(text: str) -> frozenset[str]:
    """The text's index words that tell something: not stop words (`terms.tokenize`),
    nor a single Chinese character (上, 好) or an English word of fewer than three letters."""
    return frozenset(w for w in terms.tokenize(text) if len(w) >= (2 if ranking.has_cjk(w) else 3))


# The words that ask, not what about: shared by two questions, they tell nothing. Nor do
# those for how often ("我早上一般喝点啥？" is not answered by "嗯 一般配个面包").
_ASKING_WORDS = frozenset(
    w
    for text in (
        "time times much many old long name names day days date kind type sort",
        "usually normally generally typically always often",
        "几点 多少 多久 几号 哪天 名字 时候 什么 哪里 哪儿 哪个 怎么 多长",
        "一般 平时 通常 经常 总是 平常",
    )
    for word in text.split()
    for w in (*_words(word), word)
)


@dataclass(frozen=True, slots=True)
class NewerFactsFirst:
    """A newer statement goes just above the highest-ranked older one it most likely
    replaces: the older result whose own text is similar (turn-vector cosine).

    - A result that states a change in words (改成, 取消, instead, no longer, moved …)
      replaces one at `min_similarity` or more.
    - For a question about how things stand (`ranking.asks_about_now`: "what am i driving
      these days?", 我现在在哪上班？, 去大阪的航班号是多少？), unless it names a speaker of
      the results and is not about the user (LoCoMo's "What is Caroline's identity?"
      gathers what she said across sessions, where the older statements are answers too),
      any statement (not the assistant's, not a summary)
      the service is confident about (relevance ≥ `confident`) replaces an older one at
      `restate_similarity` or more, when it is at least `restate_relevance` as relevant and
      does not say it adds to it ("also", "too", 又, 也) and, for a question that asks for
      a time or a place, names one, and is not about someone else than the question
      ("we adopted a kitten" for "what's my dog's name?"): people state most updates without
      a change word ("sold the civic and got a used model 3", 新工作在腾讯). Not the
      conversation's own turns, which `HeldTurnsLast` places.
    - A change the user announced, then told ("coach changed the schedule again smh", then
      "maya's practice is mondays and wednesdays 4:30 now"): for a question about the
      user, the user's next turn in that session, when it is among the results and is
      neither a reaction ("Thanks!") nor a question ("Do I need to bring anything?"), goes
      just below the announcement.
    - Never across people or pets (`ranking.about_others`): "my brother just moved to
      austin" does not replace "my sister lives in denver".
    - In one conversation, the user's statement a few turns after another of theirs
      (`thread_turns`) is on its topic more often than its words show ("ya down to 1.5
      cups" after "feeding rex 2 cups of kibble a day", cosine 0.48; "oh wait we just moved
      last week, its 88 harbor rd now" after "my address is 14 elm st apt 2", 0.30): there
      a change replaces it at `thread_similarity`, and so does a statement of how things
      stand now or a correction ("he's with mrs greene now", 现在去公司旁边的乐刻, "actually
      …", 不对) when it is the thread's statement most similar to it.

    Skipped when the request asks about a period (`time_range`, a named date), where the
    older statement may be the answer. With `as_of` it applies among what existed then.

    A result is compared only with the older ones ranked above it: by the similar hits
    the index found for it in the same search (`VectorHit.similar`, the embedded index,
    asked through `VectorQuery.compare_turns`: `compares`), else by the hits' stored turn
    vectors (the Qdrant server's, which carry them). bench/README.md, "Updates said
    without a change word"."""

    min_similarity: float = 0.4
    # None: only a change in words promotes.
    restate_similarity: float | None = 0.5
    restate_relevance: float = 0.7
    # Only among the best results: each one that may restate is compared with every one
    # above it (300 candidates took ~90 ms on the server path).
    restate_depth: int = 50
    # The user's next turn after an announced change comes along from this relevance: a
    # new value often shares few words with the question ("verizon fios gig" for "who's
    # our internet provider"), an aside none ("lol my cat threw up on the rug", 0.11).
    told_relevance: float = 0.15
    # The same user's turns at most this many apart in one session (an exchange or two).
    thread_turns: int = 4
    thread_similarity: float = 0.25
    # ... against a statement of the thread at most this much less similar than the
    # closest: "老师那边调了时间" is 0.57 from "我女儿在学钢琴" and 0.32 from "actually i got
    # a new one, 555-0142"; "复查完医生说加到一片" is 0.43 from "嗯早上空腹" between them and
    # 0.36 from "我每天吃半片优甲乐", which it replaces.
    closest_margin: float = 0.15
    # The share of the replaced statement's relevance a new value holds at least.
    inherits: float = 0.5
    confident: float = relevance.CONFIDENT_RELEVANCE

    def restates(self, spec: SearchSpec) -> bool:
        """Whether a statement without a change word may replace an older one here: a
        question about now (`ranking.asks_about_now`). `__call__` also leaves out one that
        names a speaker of the results and is not about the user."""
        return self.restate_similarity is not None and ranking.asks_about_now(spec.query)

    def compares(self, spec: SearchSpec) -> Callable[[MemoryPayload], float | None] | None:
        """`VectorQuery.compare_turns` for this search: the hits that may replace another,
        at the lowest cosine that lets them. None: none may."""
        if spec.asks_about_a_period():
            return None
        # A change is compared down to the thread's floor (`replaces` holds the others to
        # `min_similarity`); a statement of now too, which replaces only in a thread.
        restate = self.restate_similarity if self.restates(spec) else None
        if restate is None:
            change = self.min_similarity
            return lambda payload: change if states_change(payload) else None
        floor = min(self.min_similarity, self.thread_similarity, restate)

        held = applies(spec)

        def compare(payload: MemoryPayload) -> float | None:
            if states_change(payload):
                return floor
            if not _may_restate(payload) or (held and holds(spec, payload)):
                return None
            return floor if text_facts(payload.content, payload.role).current else restate

        return compare

    async def __call__(self, spec: SearchSpec, candidates: list[Candidate], /) -> list[Candidate]:
        if spec.asks_about_a_period() or len(candidates) < 2:
            return candidates
        now = self.restates(spec) and (
            ranking.asks_about_user(spec.query) or not _names_a_speaker(spec.query, candidates)
        )
        facts = [text_facts(c.hit.payload.content, c.hit.payload.role) for c in candidates]
        asked = _subjects(spec.query) - {ranking.SELF}
        restating, current = self._may_move(spec, candidates, facts, now, asked)
        items = [
            ranking.Statement(
                created_at=_said_at(c.hit.payload),
                changes=f.states_change or r or cur,
            )
            for c, f, r, cur in zip(candidates, facts, restating, current, strict=True)
        ]
        if not any(item.changes for item in items):
            return candidates
        hits = [c.hit for c in candidates]
        cosine = _turn_cosines(hits)

        def replaces(i: int, k: int) -> bool:
            # The thread first: a statement of now is compared only there (300 candidates
            # saying "now" in as many sessions took ~55 ms compared pair by pair).
            thread = now and self._in_thread(hits[i].payload, hits[k].payload)
            if not (facts[i].states_change or restating[i] or (current[i] and thread)):
                return False
            if _about_others(hits[i].payload, hits[k].payload, facts[i], facts[k], thread=thread):
                return False
            if self._confirms(hits[i], hits[k], facts[k]):
                return False
            known = hits[i].similar
            c = cosine(i, k) if known is None else known.get(hits[k].id)
            if c is None:
                return False
            if facts[i].states_change or (current[i] and thread):
                # The thread's floor only against the statements of the thread closest to
                # it (`closest_margin`), and a statement of now, or a correction, replaces
                # only those:
                # "actually i got a new one, 555-0142" is 0.68 from "my phone number is
                # 555-0198" and 0.39 from "thurs 7ish" before them; "老师那边调了时间" was
                # ≥ 0.25 from it, and closest to "我女儿在学钢琴，每周六上午".
                low = thread and c >= closest(i) - self.closest_margin
                if not (facts[i].states_change or low):
                    return False
                if low and facts[i].states_change and not question.answered_by(hits[i].payload):
                    # At the thread's floor a change names what the question asks for, as
                    # restating does: "switched to almond milk btw" is no new time of
                    # "yoga on thursdays at 6" (0.25-0.35 is as near as unrelated turns of
                    # one chat come).
                    low = False
                if c >= (self.thread_similarity if low else self.min_similarity):
                    if facts[i].states_change:
                        announced.append(i)
                    replaced[i] = k
                    return True
                return False
            if not restating[i]:
                return False
            assert self.restate_similarity is not None
            if (
                c >= self.restate_similarity
                and hits[k].payload.role != "assistant"
                and candidates[i].semantic >= self.restate_relevance * candidates[k].semantic
            ):
                replaced[i] = k
                return True
            return False

        question = _Question.of(spec.query)
        closest = cache(partial(self._closest_in_thread, hits, cosine))
        announced: list[int] = []
        replaced: dict[int, int] = {}  # a result moved -> the one it replaces
        order = ranking.promote_changes(items, replaces)
        # The user's next turn, for a question about the user: LoCoMo's speakers announce
        # and go on about other things (R@5 0.684 → 0.677 when it applied to them).
        if ranking.asks_about_user(spec.query):
            self._bring_told(candidates, facts, asked, announced, order)
        return [self._answering(spec, candidates, i, replaced.get(i)) for i in order]

    def _bring_told(
        self,
        candidates: list[Candidate],
        facts: list[TextFacts],
        asked: frozenset[str],
        announced: list[int],
        order: list[int],
    ) -> None:
        """Moves (in `order`) the user's next turn just below each announced change."""
        hits = [c.hit for c in candidates]
        for i in announced:
            said = MemoryPayload.text_of(hits[i].payload.content, hits[i].payload.role)
            # A change that names its new value is told already ("switched to a new
            # number, 555-0142"): the next turn is about something else.
            if ranking.names_amount(said) or ranking.names(said, "time"):
                continue
            j = _next_user_turn(hits, i) if hits[i].payload.role == "user" else None
            if j is None or order.index(j) < order.index(i):
                continue
            told = MemoryPayload.text_of(hits[j].payload.content, "user")
            if not (
                facts[j].filler
                or ranking.ends_asking(told)
                or candidates[j].semantic < self.told_relevance
                or ranking.about_others(asked, facts[j].subjects - {ranking.SELF})
            ):
                order.remove(j)
                order.insert(order.index(i) + 1, j)

    def _may_move(
        self,
        spec: SearchSpec,
        candidates: list[Candidate],
        facts: list[TextFacts],
        now: bool,
        asked: frozenset[str],
    ) -> tuple[list[bool], list[bool]]:
        """For each candidate: may it restate an older one (no change word), and may it
        replace one as a statement of now or a correction (in a thread only)?"""
        # The conversation's own turns (`HeldTurnsLast`) are compared with what they may
        # update there: a follow-up's "明天就出发去哈尔滨了" is no new value of "下周去哈尔滨
        # 出差，…零下二十多度" that the question asks for.
        held = applies(spec)
        # A new value answers what the question asks for: a time for "几点起飞", a place
        # for "which city" ("我朋友推荐我在成都去看大熊猫基地" is no new departure time).
        # Nor is it about someone else than the question asks about ("we adopted a
        # kitten!! her name is pepper" is no new name of "my dog").
        kind = _asks_for(spec.query) if now else None
        question = _Question.of(spec.query)
        restating = [
            now
            and n < self.restate_depth
            and not f.states_change
            and not f.adds
            and c.semantic >= self.confident
            and _may_restate(c.hit.payload)
            and not (held and holds(spec, c.hit.payload))
            and (kind is None or names_of(c.hit.payload.content, c.hit.payload.role, kind))
            and not ranking.about_others(asked, f.subjects - {ranking.SELF})
            for n, (c, f) in enumerate(zip(candidates, facts, strict=True))
        ]
        # A statement of now is a change only in a thread, and only where restating may be.
        # A statement of now, or a correction, is held to restating's tests but the
        # similarity and the relevance ratio, and has to be relevant (`told_relevance`) or
        # name a number ("actually i got a new one, 555-0142", 0.11): "yes please, right now
        # im swamped", "oops sorry wrong chat lol", 我现在也在学日语了 replace nothing.
        current = [
            now
            and n < self.restate_depth
            and f.current
            and not f.adds
            and _may_restate(c.hit.payload)
            and not (held and holds(spec, c.hit.payload))
            and not ranking.ends_asking(
                text := MemoryPayload.text_of(c.hit.payload.content, "user")
            )
            and not ranking.about_others(asked, f.subjects - {ranking.SELF})
            and (c.semantic >= self.told_relevance or ranking.names_amount(text))
            # ... and names what the question asks for (a time, a place, a number), as
            # restating does: "好主意！他现在在弹小汤四" is no new length of "老师要求每天
            # 练40分钟" (老师让孩子每天练琴多久), "im at like 43k now" no new due date.
            and question.answered_by(c.hit.payload)
            for n, (c, f) in enumerate(zip(candidates, facts, strict=True))
        ]
        return restating, current

    def _answering(
        self, spec: SearchSpec, candidates: list[Candidate], i: int, k: int | None
    ) -> Candidate:
        """Result `i`, holding at least `inherits` of the relevance of the statement `k` it
        replaces: it answers what that one answered, in words the question may not share
        ("复查完医生说加到一片", 0.08, for 优甲乐现在一次吃多少 over "我每天吃半片优甲乐", 0.97),
        and the relevance floor (`MinRelevance`, after this stage) would drop it and keep
        the old value. Nor ever keep the old one alone: a new dose held 0.099 of "started
        the sertraline today, 50mg" (0.198) for "what dose of zoloft am i on", under the
        0.1 floor the old one passed."""
        if k is None:
            return candidates[i]
        return _not_below(candidates[i], candidates[k], self.inherits, spec.min_relevance)

    def _closest_in_thread(
        self, hits: list[VectorHit], cosine: Callable[[int, int], float | None], i: int
    ) -> float:
        """The highest turn cosine of hit `i` with an older hit of its thread (0: none)."""
        known = hits[i].similar
        best = 0.0
        for j, h in enumerate(hits):
            if j == i or not self._in_thread(hits[i].payload, h.payload):
                continue
            c = cosine(i, j) if known is None else known.get(h.id)
            if c is not None and c > best:
                best = c
        return best

    @classmethod
    def _confirms(cls, newer: VectorHit, older: VectorHit, said: TextFacts) -> bool:
        """Is `newer` the assistant confirming the change the user just stated in `older`
        ("好的，改成周四晚上了。几点到？" after "哦不对，不是周三，是周四")? Then the user's
        words stay first. News the assistant brings after a plain statement ("your airline
        just emailed: the flight was rescheduled to 8:15pm" after "my flight to boston is at
        6pm") is no confirmation."""
        return (
            newer.payload.role == "assistant"
            and cls._next_after(newer, older)
            and (said.states_change or said.current)
        )

    @staticmethod
    def _next_after(newer: VectorHit, older: VectorHit) -> bool:
        """Is `newer` at most two turns after `older` in its session (the reply to it, or
        the next turn but one)?"""
        a, b = _place(newer.payload), _place(older.payload)
        return a is not None and b is not None and a[0] == b[0] and 0 < a[1] - b[1] <= 2

    def _in_thread(self, newer: MemoryPayload, older: MemoryPayload) -> bool:
        """Both the user's, in one session, the newer at most `thread_turns` after."""
        if newer.role != "user" or older.role != "user":
            return False
        a, b = _place(newer), _place(older)
        if a is None or b is None or a[0] != b[0]:
            return False
        return 0 < a[1] - b[1] <= self.thread_turns


def _about_others(
    newer: MemoryPayload, older: MemoryPayload, said: TextFacts, was: TextFacts, *, thread: bool
) -> bool:
    """Are the two statements about different people (`ranking.about_others`)? In a thread,
    the user correcting what they just said names themselves ("sorry not lincoln center
    lol, … i was thinking of last year" after "my daughter's recital is at lincoln
    center"): no one else, when the correction takes up a word of the statement (not "no
    sorry, i meant an email about the field trip", which corrects a request)."""
    if not ranking.about_others(said.subjects, was.subjects):
        return False
    text = MemoryPayload.text_of(newer.content, "user")
    return not (
        thread
        and said.subjects <= {ranking.SELF}
        and ranking.corrects(text)
        and bool(_words(text) & _words(MemoryPayload.text_of(older.content, "user")))
    )


def _names_a_speaker(query: str, candidates: Sequence[Candidate]) -> bool:
    """Does the question name someone who speaks in the results (LoCoMo's "What is
    Caroline's identity?" over "Caroline: …")? Such a question gathers what that person
    said across many sessions, where the older statements are answers too."""
    speakers = {
        speaker
        for c in candidates
        if c.hit.payload.role is not None
        and (speaker := c.hit.payload.content.partition(": ")[0].strip())
        and speaker not in ("user", "assistant")
        and len(speaker) <= 64
    }
    return any(ranking.names_speaker(query, s) for s in speakers)


def _next_user_turn(hits: Sequence[VectorHit], i: int) -> int | None:
    """The hit that is the user's next turn after hit `i` in its session (the assistant's
    reply between them at most), if one is among the hits. A change is often announced
    and then told: "coach changed the schedule again smh" / "what's the new one?" /
    "maya's practice is mondays and wednesdays 4:30 now"; 团子的猫粮换了 / 现在吃皇家的."""
    at = _place(hits[i].payload)
    if at is None:
        return None
    session, seq = at
    best: tuple[int, int] | None = None
    for j, h in enumerate(hits):
        p = h.payload
        there = _place(p) if p.role == "user" and j != i else None
        if (
            there is not None
            and there[0] == session
            and seq < there[1] <= seq + 2
            and (best is None or there[1] < best[0])
        ):
            best = (there[1], j)
    return best[1] if best is not None else None


def _said_at(payload: MemoryPayload) -> float:
    """When the memory was said, in epoch seconds; a turn's place in its session breaks a
    tie (a microsecond a turn): the messages of one request without their own
    `created_at` share the time it came in, and "actually i got a new one, 555-0142" is
    still newer than "my phone number is 555-0198" before it."""
    at = _place(payload)
    return payload.created_at.timestamp() + (at[1] * 1e-6 if at is not None else 0.0)


def _place(payload: MemoryPayload) -> tuple[str, int] | None:
    """The session and seq of a promoted turn (its one source); None for anything else."""
    if len(payload.sources) != 1:
        return None
    source = payload.sources[0]
    session, seq = source.get("session_id"), source.get("seq")
    return (session, seq) if isinstance(session, str) and isinstance(seq, int) else None


def _may_restate(payload: MemoryPayload) -> bool:
    """A memory that may state the new value of a fact: not the assistant's, not a
    summary, not the user's asking to be reminded ("what's my blood type?" is no newer
    "my blood type is O negative")."""
    return (
        payload.role != "assistant"
        and payload.kind != "summary"
        and text_facts(payload.content, payload.role).question_terms is None
    )


@dataclass(frozen=True, slots=True)
class HeldTurnsLast:
    """After a rewrite from the conversation's latest turns (recall's `session_id`), from
    the first memory of those turns in the ranking on: the results from elsewhere that the
    service is confident about (`scores.semantic` ≥ `confident`) first, then those turns'
    memories, then the rest; each part in its order. The caller holds those turns (they
    are the conversation it asks in: the in-context layer), and the rewritten query carries
    their words, so they matched it first for that reason alone: "what is she studying
    again?" became "… my sister …" and found "my sister is coming home for christmas", the
    turn it was asked after (0.90), above "我妹妹在伦敦读研究生，学建筑" (0.82). Weak matches
    elsewhere go below them, so a question about what the conversation just said is
    answered from it, not from "can you suggest a podcast" (0.12). A result a held turn may
    update (older, and similar to it: turn cosine ≥ `min_similarity`), wherever it ranked,
    goes just below the held turns: "the dentist called, it's Friday at 10am now" above
    "My dentist appointment is on Tuesday at 3pm.". Nothing moves when `session_ids` names
    the conversation (asked of it), nor in context (it passes the turns it shows).
    bench/README.md, "Follow-ups in a new conversation"."""

    # Higher than a change statement's 0.4: without a word that says so, a turn that merely
    # names the same person ("my sister is coming home for christmas", 0.47 with "My sister
    # is doing a master's in architecture") is no update; "the dentist called, it's Friday
    # at 10am now" is one of "My dentist appointment is on Tuesday at 3pm." (0.74).
    min_similarity: float = 0.65
    confident: float = relevance.CONFIDENT_RELEVANCE

    async def __call__(self, spec: SearchSpec, candidates: list[Candidate], /) -> list[Candidate]:
        if not applies(spec):
            return candidates
        held = [holds(spec, c.hit.payload) for c in candidates]
        first = next((n for n, h in enumerate(held) if h), None)
        if first is None:
            return candidates
        hits = [c.hit for c in candidates]
        by_vectors = ranking.similar_by_vectors(_turn_units(hits), self.min_similarity)
        mine = [n for n, h in enumerate(held) if h]

        def replaced(k: int) -> bool:
            """Older than a held turn it is similar to: what that turn may update."""
            at = hits[k].payload.created_at
            for n in mine:
                known = hits[n].similar
                similar = (
                    by_vectors(n, k)
                    if known is None
                    else known.get(hits[k].id, -1.0) >= self.min_similarity
                )
                if similar and hits[n].payload.created_at > at:
                    return True
            return False

        others = [n for n, h in enumerate(held) if not h]
        updated = {n for n in others if replaced(n)}
        before = [n for n in others if n < first and n not in updated]
        confident = [
            n
            for n in others
            if n > first and n not in updated and candidates[n].semantic >= self.confident
        ]
        ahead = {*before, *confident, *updated}
        rest = [n for n in others if n not in ahead]
        order = [*before, *confident, *mine, *(n for n in others if n in updated), *rest]
        return [candidates[n] for n in order]


def applies(spec: SearchSpec) -> bool:
    """Whether `HeldTurnsLast` reorders this search: turns are held, and the search is not
    asked of their conversation itself (`session_ids` naming it)."""
    if not spec.held or spec.session_id is None:
        return False
    return spec.session_ids is None or spec.session_id not in spec.session_ids


def holds(spec: SearchSpec, payload: MemoryPayload) -> bool:
    """Is this memory one of the turns the rewrite read (every source one of them)?"""
    sources = payload.sources
    return bool(sources) and all(
        s.get("session_id") == spec.session_id and s.get("seq") in spec.held for s in sources
    )


def states_change(payload: MemoryPayload) -> bool:
    """`VectorQuery.compare_turns` for change promotion: the hits it compares."""
    return text_facts(payload.content, payload.role).states_change


def _turn_cosines(hits: Sequence[VectorHit]) -> Callable[[int, int], float | None]:
    """The cosine of two hits' stored turn vectors (None: either has none)."""
    unit = _turn_units(hits)

    def cosine(i: int, k: int) -> float | None:
        a, b = unit(i), unit(k)
        return None if a is None or b is None else float(a @ b)

    return cosine


def _turn_units(hits: Sequence[VectorHit]) -> Callable[[int], NDArray[np.float32] | None]:
    """Each hit's unit turn vector, built only when a comparison reads it (building them
    all was ~5% of a recall's CPU, profiled)."""

    @cache
    def unit(i: int) -> NDArray[np.float32] | None:
        vectors = hits[i].vectors
        return _unit(vectors.turn) if vectors is not None else None

    return unit


def _unit(v: Sequence[float] | NDArray[np.float32]) -> NDArray[np.float32] | None:
    if not len(v):
        return None
    a = np.asarray(v, dtype=np.float32)
    n = float(np.linalg.norm(a))
    return a / n if n > 0 else None


def to_result(candidate: Candidate) -> RecallResult:
    """`to_results` of one candidate."""
    return RecallResult.model_validate(_result_fields(candidate))


def to_results(candidates: Sequence[Candidate]) -> list[RecallResult]:
    """Only the answers become response objects; the rest of the pool is just numbers. All
    in one validation from plain fields: building each result, its scores and its sources
    as models one by one took ~40% longer (50 results)."""
    return _RESULTS.validate_python([_result_fields(c) for c in candidates])


_RESULTS = TypeAdapter(list[RecallResult])


def _result_fields(c: Candidate) -> dict[str, Any]:
    p = c.hit.payload
    return {
        "id": c.hit.id,
        "kind": p.kind,
        "memory_type": p.memory_type,
        "content": p.content,
        "score": round(c.score, 6),
        "scores": {
            "semantic": round(c.semantic, 6),
            "recency": round(c.recency, 6),
            "importance": round(c.importance, 6),
        },
        "created_at": p.created_at,
        "last_accessed_at": p.last_accessed_at,
        "access_count": p.access_count,
        "sources": p.sources,
        "metadata": p.metadata,
    }
