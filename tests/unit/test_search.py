"""The recall pipeline's pieces without I/O: the spec, the score stage, stages after it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.core import scoring
from app.schemas.recall import RecallRequest
from app.services.search import (
    Candidate,
    Pool,
    Score,
    SearchSpec,
    no_rewrite,
    run_stages,
    to_result,
)
from app.settings import Settings
from app.stores.vectors import MemoryPayload, VectorHit

settings = Settings(_env_file=None)
score = Score(settings)
NOW = datetime(2025, 1, 1, tzinfo=UTC)
BEST_RRF = sum(
    1.0 / (settings.rrf_k - 1 + 1.0 / w) for w in (settings.dense_weight, settings.sparse_weight)
)


def hit(
    n: int,
    rrf: float,
    *,
    days_old: float = 0.0,
    importance: float = 0.5,
    access_count: int = 0,
    **payload: Any,
) -> VectorHit:
    created = (NOW - timedelta(days=days_old)).timestamp()
    return VectorHit(
        id=uuid.UUID(int=n),
        score=rrf,
        payload=MemoryPayload.from_dict(
            {
                "tenant_id": "t",
                "user_id": "u",
                "session_id": "s1",
                "kind": "memory",
                "memory_type": "episodic",
                "content": f"memory {n}",
                "created_at": created,
                "importance": importance,
                "access_count": access_count,
                "pinned": 0,
                "metadata": {},
                "sources": [{"session_id": "s1", "message_id": f"m{n}", "seq": n}],
                **payload,
            }
        ),
    )


def spec(**overrides: Any) -> SearchSpec:
    values: dict[str, Any] = {
        "tenant_id": "t",
        "user_id": "u",
        "query": "q",
        "top_k": 10,
        "as_of": NOW,
    }
    return SearchSpec(**(values | overrides))


def test_spec_from_a_request() -> None:
    body = RecallRequest.model_validate(
        {
            "user_id": "u",
            "query": "where?",
            "session_id": "s1",
            "top_k": 3,
            "memory_types": ["semantic"],
            "kinds": ["memory"],
            "time_range": {"from": "2024-01-01T00:00:00Z", "to": "2024-02-01T00:00:00Z"},
            "metadata": {"topic": "gear"},
            "weights": {"semantic": 1, "recency": 2, "importance": 3},
            "rewrite": "off",
            "as_of": "2024-01-15T00:00:00Z",
        }
    )
    s = SearchSpec.from_request("t", body)
    assert (s.tenant_id, s.user_id, s.query, s.top_k) == ("t", "u", "where?", 3)
    assert (s.memory_types, s.kinds, dict(s.metadata)) == (
        ("semantic",),
        ("memory",),
        {"topic": "gear"},
    )
    assert s.weights == scoring.Weights(1, 2, 3)
    assert (s.session_id, s.session_scope, s.rewrite) == ("s1", True, "off")
    assert s.created_until() == datetime(2024, 1, 15, tzinfo=UTC)  # as_of is earlier

    bare = SearchSpec.from_request(
        "t", RecallRequest.model_validate({"user_id": "u", "query": "x"})
    )
    assert (bare.memory_types, bare.kinds, bare.weights, bare.created_until()) == (
        None,
        None,
        None,
        None,
    )
    assert (bare.session_scope, bare.rewrite, bare.top_k) == (False, "auto", 10)


def test_created_until_is_the_earlier_bound() -> None:
    later = NOW + timedelta(days=1)
    assert spec(created_to=later).created_until() == NOW
    assert spec(created_to=NOW - timedelta(days=1)).created_until() == NOW - timedelta(days=1)
    assert spec(as_of=None, created_to=later).created_until() == later


def test_score_ranks_by_the_composite_score() -> None:
    hits = [hit(1, 0.5 * BEST_RRF), hit(2, BEST_RRF), hit(3, 0.8 * BEST_RRF, pinned=True)]
    ranked = score(spec(), Pool(hits, max_access=0))
    assert [c.hit.id.int for c in ranked] == [2, 3, 1]
    best = ranked[0]
    assert (best.semantic, best.recency) == (1.0, 1.0)
    w = score.default_weights().normalised()
    assert best.score == scoring.combine(w, best.semantic, best.recency, best.importance)


def test_score_uses_the_requested_weights_and_as_of() -> None:
    hits = [hit(1, BEST_RRF, days_old=400), hit(2, 0.1 * BEST_RRF, days_old=1)]
    by_recency = score(spec(weights=scoring.Weights(0, 1, 0)), Pool(hits, max_access=0))
    assert [c.hit.id.int for c in by_recency] == [2, 1]
    assert by_recency[0].score == by_recency[0].recency
    # As of 400 days ago, the old memory was new.
    earlier = score(spec(as_of=NOW - timedelta(days=400)), Pool(hits, max_access=0))
    assert [c.recency for c in earlier] == [1.0, 1.0]


def test_importance_is_normalised_by_the_users_highest_access_count() -> None:
    hits = [hit(1, BEST_RRF, access_count=10), hit(2, BEST_RRF, access_count=0)]
    ranked = score(spec(weights=scoring.Weights(0, 0, 1)), Pool(hits, max_access=10))
    assert [c.hit.id.int for c in ranked] == [1, 2]
    share = settings.importance_intrinsic_share
    assert ranked[0].importance == scoring.importance(0.5, 10, 10, share)


def test_ties_keep_the_index_order() -> None:
    hits = [hit(n, 0.5 * BEST_RRF) for n in range(5)]
    assert [c.hit.id.int for c in score(spec(), Pool(hits, 0))] == list(range(5))


@given(
    st.lists(
        st.tuples(
            st.floats(0, 0.5),
            st.floats(0, 3000),
            st.floats(0, 1),
            st.integers(0, 50),
            st.booleans(),
        ),
        max_size=40,
    ),
    st.tuples(st.floats(0, 10), st.floats(0, 10), st.floats(0, 10)),
)
def test_scores_stay_in_the_unit_interval_and_sorted(
    rows: list[tuple[float, float, float, int, bool]], weights: tuple[float, float, float]
) -> None:
    hits = [
        hit(n, rrf, days_old=age, importance=imp, access_count=acc, pinned=pin)
        for n, (rrf, age, imp, acc, pin) in enumerate(rows)
    ]
    ranked = score(spec(weights=scoring.Weights(*weights)), Pool(hits, max_access=50))
    assert sorted(c.hit.id for c in ranked) == sorted(h.id for h in hits)
    assert [c.score for c in ranked] == sorted((c.score for c in ranked), reverse=True)
    for c in ranked:
        assert all(0.0 <= x <= 1.0 for x in (c.semantic, c.recency, c.importance, c.score))


def test_a_result_reports_the_candidates_numbers() -> None:
    (c,) = score(spec(), Pool([hit(7, BEST_RRF, metadata={"topic": "x"})], 0))
    result = to_result(c)
    assert result.id == uuid.UUID(int=7)
    assert (result.kind, result.memory_type, result.content) == ("memory", "episodic", "memory 7")
    assert result.score == round(c.score, 6)
    assert result.scores.semantic == round(c.semantic, 6)
    assert result.created_at == NOW
    assert result.last_accessed_at is None
    assert result.sources[0].message_id == "m7"
    assert result.metadata == {"topic": "x"}


async def test_stages_run_in_order_over_the_pool_then_top_k() -> None:
    pool = score(spec(), Pool([hit(n, (10 - n) / 10 * BEST_RRF) for n in range(10)], 0))
    seen: list[int] = []

    async def drop_even(s: SearchSpec, candidates: list[Candidate], /) -> list[Candidate]:
        seen.append(len(candidates))
        return [c for c in candidates if c.hit.id.int % 2]

    async def boost_last(s: SearchSpec, candidates: list[Candidate], /) -> list[Candidate]:
        seen.append(len(candidates))
        last = dataclasses.replace(candidates[-1], score=1.0)
        return [last, *candidates[:-1]]

    top = await run_stages(spec(top_k=3), pool, [drop_even, boost_last])
    assert seen == [10, 5]  # each stage saw the whole pool, not just the top 3
    assert [c.hit.id.int for c in top] == [9, 1, 3]
    assert [c.hit.id.int for c in await run_stages(spec(top_k=2), pool, [])] == [0, 1]


async def test_no_rewrite_searches_the_query_as_asked() -> None:
    assert await no_rewrite(spec()) is None
