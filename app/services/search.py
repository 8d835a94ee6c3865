"""The recall pipeline's pieces that do no I/O: the typed search spec, the candidates that
stages hand on, the seams for a query rewriter and for stages after scoring, and the score
stage itself (docs/architecture.md §3).

A search runs `rewrite → retrieve → score → stages… → top_k` (`RecallService.search`);
docs/seams.md shows how to add a stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol

from app.core import scoring
from app.core.rewrite import Rewrite, Turn
from app.schemas.common import Source
from app.schemas.recall import RecallResult, Scores
from app.settings import Settings
from app.stores.vectors import VectorHit

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
    # The session the query was asked in: where a rewrite finds the turns it refers to.
    session_id: str | None = None
    # Narrow to memories sourced from `session_id` (recall's `session_id`).
    # Carried, not applied yet: the index payload's `session_id` is the first source's
    # session only, while `sources` may span sessions. Context leaves it off: memories
    # from the session's other turns and from other sessions are what context adds.
    session_scope: bool = False
    rewrite: RewriteMode = "auto"
    # The conversation a rewrite reads, when the caller has it already (context); None: the
    # rewriter reads `session_id`'s newest turns itself.
    turns: tuple[Turn, ...] | None = None

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
            session_scope=body.session_id is not None,
            rewrite=body.rewrite,
        )

    def created_until(self) -> datetime | None:
        """The upper bound on `created_at`: the time range's end, or `as_of` if earlier."""
        if self.as_of is None:
            return self.created_to
        return min(self.created_to, self.as_of) if self.created_to is not None else self.as_of


@dataclass(frozen=True, slots=True)
class Pool:
    """What retrieval found: the candidates, best fused score first, and the user's
    highest access count (it normalises importance)."""

    hits: list[VectorHit]
    max_access: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """A scored hit. Stages may filter, reorder or re-score (`dataclasses.replace`) them;
    `score` (kept in [0, 1]) ranks the results, and it and the terms are what they report."""

    hit: VectorHit
    semantic: float
    recency: float
    importance: float
    score: float


@dataclass(frozen=True, slots=True)
class Found:
    results: list[RecallResult]
    rewritten_query: str | None  # None: the query was searched as asked
    llm_usage: dict[str, int] | None = None  # tokens the rewrite's LLM call spent


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


class Score:
    """The composite score (docs/architecture.md §3) over a pool, ranked best first (pure)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def default_weights(self) -> scoring.Weights:
        s = self.settings
        return scoring.Weights(s.weight_semantic, s.weight_recency, s.weight_importance)

    def __call__(self, spec: SearchSpec, pool: Pool) -> list[Candidate]:
        now = spec.as_of or datetime.now(UTC)
        w = (spec.weights or self.default_weights()).normalised()
        candidates = []
        for hit in pool.hits:
            semantic, recency, importance = self._terms(hit, now, pool.max_access)
            score = scoring.combine(w, semantic, recency, importance)
            candidates.append(Candidate(hit, semantic, recency, importance, score))
        return sorted(candidates, key=lambda c: c.score, reverse=True)

    def _terms(self, hit: VectorHit, now: datetime, max_access: int) -> tuple[float, float, float]:
        """(semantic, recency, importance) of one candidate."""
        s = self.settings
        p = hit.payload
        last = p.last_accessed_at or p.created_at
        semantic = scoring.semantic_from_rrf(hit.score, s.dense_weight, s.sparse_weight, s.rrf_k)
        recency = scoring.recency(now, last, s.recency_lambda_per_day)
        intrinsic = 1.0 if p.pinned else p.importance
        importance = scoring.importance(
            intrinsic, p.access_count, max_access, s.importance_intrinsic_share
        )
        return semantic, recency, importance


def to_result(candidate: Candidate) -> RecallResult:
    """Only the answers become response objects; the rest of the pool is just numbers."""
    c = candidate
    p = c.hit.payload
    return RecallResult(
        id=c.hit.id,
        kind=p.kind,
        memory_type=p.memory_type,
        content=p.content,
        score=round(c.score, 6),
        scores=Scores(
            semantic=round(c.semantic, 6),
            recency=round(c.recency, 6),
            importance=round(c.importance, 6),
        ),
        created_at=p.created_at,
        last_accessed_at=p.last_accessed_at,
        access_count=p.access_count,
        sources=[Source.model_validate(x) for x in p.sources],
        metadata=p.metadata,
    )
