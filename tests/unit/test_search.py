"""The recall pipeline's pieces without I/O: the spec, the score stage, stages after it."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import uuid
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.core import ranking, relevance, scoring, terms
from app.schemas.recall import RecallRequest
from app.services.search import (
    Candidate,
    HeldTurnsLast,
    MinRelevance,
    NewerFactsFirst,
    Pool,
    Score,
    SearchSpec,
    UserWordsFirst,
    _unit,
    fused_pool,
    no_rewrite,
    run_stages,
    text_facts,
    to_result,
)
from app.settings import Settings
from app.stores.vectors import CandidateLists, MemoryPayload, StoredVectors, VectorHit
from app.wiring import score_config

settings = Settings(_env_file=None)
score = Score(score_config(settings))
NOW = datetime(2025, 1, 1, tzinfo=UTC)
QUERY = [1.0, 0.0, 0.0]


def hit(
    n: int,
    *,
    days_old: float = 0.0,
    importance: float = 0.5,
    access_count: int = 0,
    dense: list[float] | None = None,
    turn: list[float] | None = None,
    **payload: Any,
) -> VectorHit:
    created = (NOW - timedelta(days=days_old)).timestamp()
    content = payload.pop("content", f"memory number {n} about a long hike in the Alps")
    dense = dense or [1.0, 0.0, 0.0]
    ids = sorted({terms.term_id(t) for t in terms.tokenize(content)})
    return VectorHit(
        id=uuid.UUID(int=n),
        score=0.0,
        vectors=StoredVectors(dense=dense, turn=turn or dense, sparse_ids=ids),
        payload=MemoryPayload.from_dict(
            {
                "tenant_id": "t",
                "user_id": "u",
                "session_id": "s1",
                "kind": "memory",
                "memory_type": "episodic",
                "content": content,
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


def ranked(hits: list[VectorHit], max_access: int = 0, sparse: bool = True) -> Pool:
    """A pool whose dense and sparse lists both rank `hits` in this order."""
    lists = CandidateLists(list(hits), list(hits) if sparse else [])
    return Pool(lists, max_access, QUERY, frozenset())


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
            "session_ids": ["s2", "s3", "s2"],
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
    assert (s.session_id, s.session_ids, s.rewrite) == ("s1", ("s2", "s3"), "off")
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
    assert (bare.session_ids, bare.rewrite, bare.top_k) == (None, "auto", 10)


def test_created_until_is_the_earlier_bound() -> None:
    later = NOW + timedelta(days=1)
    assert spec(created_to=later).created_until() == NOW
    assert spec(created_to=NOW - timedelta(days=1)).created_until() == NOW - timedelta(days=1)
    assert spec(as_of=None, created_to=later).created_until() == later


def test_score_ranks_by_the_composite_score() -> None:
    pool = ranked([hit(2), hit(3, pinned=1), hit(1)])
    ranked_ = score(spec(), pool)
    assert [c.hit.id.int for c in ranked_] == [2, 3, 1]
    best = ranked_[0]
    # The reported semantic is the calibrated relevance of its features, not a rank.
    expected = relevance.PLAIN_COVERAGE(relevance.Features(1.0, 1.0, 0.0, 0.0))
    assert best.semantic == expected
    assert best.recency == 1.0
    key = 0.5 * 1.0 + 0.5 * expected  # rank one in both lists: fused 1.0
    w = score.default_weights().normalised()
    assert best.score == scoring.combine(w, key, best.recency, best.importance)


def test_score_uses_the_requested_weights_and_as_of() -> None:
    pool = ranked([hit(1, days_old=400), hit(2, days_old=1)])
    by_recency = score(spec(weights=scoring.Weights(0, 1, 0)), pool)
    assert [c.hit.id.int for c in by_recency] == [2, 1]
    assert by_recency[0].score == by_recency[0].recency
    # As of 400 days ago, the old memory was new.
    earlier = score(spec(as_of=NOW - timedelta(days=400)), pool)
    assert [c.recency for c in earlier] == [1.0, 1.0]


def test_importance_is_normalised_by_the_users_highest_access_count() -> None:
    pool = ranked([hit(2, access_count=0), hit(1, access_count=10)], max_access=10)
    ranked_ = score(spec(weights=scoring.Weights(0, 0, 1)), pool)
    assert [c.hit.id.int for c in ranked_] == [1, 2]
    share = settings.importance_intrinsic_share
    assert ranked_[0].importance == scoring.importance(0.5, 10, 10, share)


def test_a_candidate_in_another_language_weighs_its_dense_rank_more() -> None:
    zh = hit(1, content="我搬到里斯本了，住在海边的一个小公寓里")
    en = [hit(n) for n in range(2, 6)]
    # Dense list: the Chinese memory fifth; sparse list: only the English ones.
    pool = Pool(CandidateLists([*en, zh], en[:1]), 0, QUERY)
    k = settings.rrf_k
    cross = fused_pool(spec(query="where do I live now"), pool, score.fusion, 10)
    same = fused_pool(spec(query="我现在住在哪里"), pool, score.fusion, 10)
    assert {h.id.int: f for h, f in cross}[1] == 1 / (
        k - 1 + 5 / settings.dense_weight_cross_language
    )
    assert {h.id.int: f for h, f in same}[1] == 1 / (k - 1 + 5 / settings.dense_weight)
    # Above the English ones the encoder ranked before it (best first).
    assert [h.id.int for h, _ in cross].index(1) == 1


def test_a_cross_language_pair_is_put_on_the_same_language_scale() -> None:
    """A Chinese memory shares no term with an English query: without the map its
    relevance reads "no lexical match"; with it, the encoder's cosines carry it. A memory
    in the query's language keeps the calibration's value."""
    near = [0.9, 0.43589, 0.0]  # cosine 0.9 with QUERY
    zh = hit(1, content="我上个月搬到了里斯本", dense=near, turn=near)
    en = hit(2, content="I moved to Lisbon last month", dense=near, turn=near)
    pool = Pool(CandidateLists([zh, en], []), 0, QUERY, frozenset())
    plain = Score(score_config(Settings(_env_file=None, cross_language_relevance=False)))
    s = spec(query="where do I live")
    mapped = {c.hit.id.int: c.semantic for c in score(s, pool)}
    unmapped = {c.hit.id.int: c.semantic for c in plain(s, pool)}
    assert mapped[2] == unmapped[2]
    assert mapped[1] > unmapped[1]
    cal = relevance.PLAIN_COVERAGE
    assert cal.cross is not None
    z = cal.cos_turn * 0.9 + cal.cos_chunk * 0.9 + cal.bias
    want = relevance.sigmoid(cal.cross.apply(z, 0.9, 0.0, 0.0, 0.0) + 6.3)
    assert abs(mapped[1] - want) < 1e-4
    # The encoder likes short generic turns: of two at the same cosines, the one that only
    # asks is less likely the answer.
    ask = hit(4, content="How do you like it?", role="assistant", dense=near, turn=near)
    fact = hit(5, content="I moved to Lisbon with my sister in May", dense=near, turn=near)
    pool = Pool(CandidateLists([ask, fact], []), 0, QUERY, frozenset())
    out = {c.hit.id.int: c.semantic for c in score(spec(query="我姐姐住在哪个城市"), pool)}
    assert out[4] < out[5]
    # A mixed memory shares a language with a query in either: no map.
    mixed = hit(3, content="Deposit is two months, 押二付一", dense=near, turn=near)
    pool = Pool(CandidateLists([mixed], []), 0, QUERY, frozenset())
    for query in ("how much was the deposit", "押金是多少"):
        q = spec(query=query)
        assert score(q, pool)[0].semantic == plain(q, pool)[0].semantic


def test_each_flag_lowers_a_cross_language_pairs_relevance_and_only_its() -> None:
    cal = relevance.PLAIN_COVERAGE
    f = relevance.Features(cos_turn=0.3, cos_chunk=0.3, cov_own=0.0, cov_chunk=0.0)
    base = cal(f, cross_language=True)
    for flag in ("short", "asks", "lacks"):
        assert cal(f, cross_language=True, **{flag: True}) < base, flag
        assert cal(f, cross_language=False, **{flag: True}) == cal(f), flag


def test_the_answer_type_penalty_setting_leaves_the_relevance_alone() -> None:
    """`lacks` feeds the cross-language relevance: turning the ranking's answer-type
    penalty off must not change what `scores.semantic` reports."""
    near = [0.9, 0.43589, 0.0]
    en = hit(1, content="I really like the seafood here", dense=near, turn=near)
    pool = Pool(CandidateLists([en], [en]), 0, QUERY, frozenset())
    s = spec(query="我住在哪里")
    off = Score(score_config(Settings(_env_file=None, answer_type_penalty=0)))
    assert off(s, pool)[0].semantic == score(s, pool)[0].semantic


def test_a_lowercase_turn_is_not_known_to_lack_a_place() -> None:
    """In lowercase chat a place goes unseen ("fairmont waterfront, 3 nights"): for
    温哥华我们住的哪家酒店 it is not marked as naming none, as a capitalised turn that
    names none is (and a Chinese one, whose places show without capitals)."""
    near = [0.6, 0.8, 0.0]

    def pool_of(text: str) -> Pool:
        hits = [hit(1, content=text, dense=near, turn=near)]
        return Pool(CandidateLists(hits, []), 0, QUERY, frozenset())

    s = spec(query="温哥华我们住的哪家酒店")
    lower = score(s, pool_of("fairmont waterfront, 3 nights"))[0].semantic
    capital = score(s, pool_of("Great breakfast, 3 nights"))[0].semantic
    assert lower > capital
    named = score(s, pool_of("Fairmont Waterfront, 3 nights"))[0].semantic
    assert named > capital


def test_filler_is_penalised() -> None:
    fact = hit(1, content="I booked the flight to Chengdu for October 2nd")
    ask = hit(2, content="assistant: How do you like it?", role="assistant")
    ok = hit(3, content="OK, noted.")
    # Equal ranks on one list each side: the filler would tie with the fact.
    for filler in (ask, ok):
        out = score(spec(), Pool(CandidateLists([filler, fact], [fact, filler]), 0, QUERY))
        assert out[0].hit.id.int == 1


def test_ties_keep_the_index_order() -> None:
    hits = [hit(n) for n in range(5)]
    assert [c.hit.id.int for c in score(spec(), Pool(CandidateLists(hits, []), 0, QUERY))] == [
        0,
        1,
        2,
        3,
        4,
    ]


@given(
    st.lists(
        st.tuples(
            st.floats(-1, 1),
            st.floats(0, 3000),
            st.floats(0, 1),
            st.integers(0, 50),
            st.booleans(),
        ),
        # At most the candidate pool (30): beyond it the score keeps the best 30, by design.
        max_size=30,
    ),
    st.tuples(st.floats(0, 10), st.floats(0, 10), st.floats(0, 10)),
)
def test_scores_stay_in_the_unit_interval_and_sorted(
    rows: list[tuple[float, float, float, int, bool]], weights: tuple[float, float, float]
) -> None:
    hits = [
        hit(n, days_old=age, importance=imp, access_count=acc, pinned=int(pin), dense=[x, 1, 0])
        for n, (x, age, imp, acc, pin) in enumerate(rows)
    ]
    pool = Pool(CandidateLists(hits, hits[::2]), 50, QUERY, frozenset({1, 2}))
    # top_k above the candidate pool (30), so that every hit is scored
    ranked_ = score(spec(weights=scoring.Weights(*weights), top_k=40), pool)
    assert sorted(c.hit.id for c in ranked_) == sorted(h.id for h in hits)
    assert [c.score for c in ranked_] == sorted((c.score for c in ranked_), reverse=True)
    for c in ranked_:
        assert all(0.0 <= x <= 1.0 for x in (c.semantic, c.recency, c.importance, c.score))


def test_a_result_reports_the_candidates_numbers() -> None:
    (c,) = score(spec(), ranked([hit(7, metadata={"topic": "x"})]))
    result = to_result(c)
    assert result.id == uuid.UUID(int=7)
    assert (result.kind, result.memory_type) == ("memory", "episodic")
    assert result.score == round(c.score, 6)
    assert result.scores.semantic == round(c.semantic, 6)
    assert result.created_at == NOW
    assert result.last_accessed_at is None
    assert result.sources[0].message_id == "m7"
    assert result.metadata == {"topic": "x"}


async def test_min_relevance_drops_before_top_k() -> None:
    near, far = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    pool = score(spec(), ranked([hit(1, dense=far), hit(2, dense=near), hit(3, dense=far)]))
    cut = relevance.PLAIN_COVERAGE(relevance.Features(0.5, 0.5, 0, 0))
    kept = await run_stages(spec(min_relevance=cut, top_k=2), pool, [MinRelevance()])
    assert [c.hit.id.int for c in kept] == [2]
    everything = await run_stages(spec(top_k=2), pool, [MinRelevance()])
    assert len(everything) == 2


async def test_a_newer_change_goes_above_the_older_statement() -> None:
    v = [0.0, 0.0, 1.0]
    old = hit(1, days_old=30, turn=v, content="The move is on October 1st")
    new = hit(2, days_old=2, turn=v, content="I changed the moving date to October 8th")
    other = hit(3, turn=[0.0, 1.0, 0.0], content="We need boxes for the move next week")
    pool = [Candidate(h, 0.5, 1.0, 0.5, 0.9 - n / 10) for n, h in enumerate([old, other, new])]
    stage = NewerFactsFirst(0.4)
    out = await stage(spec(), pool)
    assert [c.hit.id.int for c in out] == [2, 1, 3]
    window = spec(created_from=NOW - timedelta(days=60))
    assert [c.hit.id.int for c in await stage(window, pool)] == [1, 3, 2]  # a period: as ranked
    named = spec(query="When was the move in October 2026?")  # a period named in the query
    assert [c.hit.id.int for c in await stage(named, pool)] == [1, 3, 2]


async def test_the_turns_a_rewrite_read_go_below_what_answers_confidently_elsewhere() -> None:
    def turn(n: int, session: str, seq: int, semantic: float, **kw: Any) -> Candidate:
        source = {"session_id": session, "message_id": f"m{seq}", "seq": seq}
        return Candidate(hit(n, sources=[source], **kw), semantic, 1.0, 0.5, 1.0 - n / 10)

    top = turn(9, "earlier", 1, 0.9)  # above the first held turn: keeps its place
    echo = turn(1, "now", 7, 0.9)  # the turn the question was asked after
    answer = turn(2, "earlier", 7, 0.82)  # the same seq in another session: not held
    older = turn(3, "now", 2, 0.70)  # the same session, before the turns the rewrite read
    fact = Candidate(hit(4, sources=[]), 0.6, 1.0, 0.5, 0.5)  # written as such: no source
    both = Candidate(
        hit(
            5,
            sources=[
                {"session_id": "now", "message_id": "m8", "seq": 8},
                {"session_id": "earlier", "message_id": "m1", "seq": 1},
            ],
        ),
        0.3,
        1.0,
        0.5,
        0.4,
    )
    held_too = turn(6, "now", 8, 0.5)
    weak = turn(7, "earlier", 3, 0.2)
    pool = [top, echo, answer, weak, older, fact, held_too, both]
    stage = HeldTurnsLast(0.4)
    asked = spec(session_id="now", held=frozenset({7, 8}))
    # From the first held turn on: the confident results from elsewhere, the held turns,
    # then the weak ones.
    assert [c.hit.id.int for c in await stage(asked, pool)] == [9, 2, 3, 4, 5, 1, 6, 7]
    # Only weak matches elsewhere: a question about what was just said keeps its answer,
    # and weak matches go below the held turns.
    junk = turn(8, "x", 1, 0.12)
    assert await stage(asked, [echo, junk, weak]) == [echo, junk, weak]
    assert await stage(asked, [echo, junk, held_too]) == [echo, held_too, junk]
    # What a held turn may update (older, its turn similar) stays below it; the rest passes.
    side = [0.0, 1.0, 0.0]
    fresh = turn(1, "now", 7, 0.9, turn=side)
    stale = turn(2, "earlier", 4, 1.0, days_old=10, turn=side)
    other = turn(3, "earlier", 5, 0.8, days_old=10)
    assert [c.hit.id.int for c in await stage(asked, [fresh, stale, other])] == [3, 1, 2]
    assert [c.hit.id.int for c in await stage(asked, [stale, fresh, other])] == [3, 1, 2]
    # As the embedded index returns them: the held turn's similar hits with their cosines,
    # each stage its own threshold (0.5 is under this one's 0.65: not an update).
    near = dataclasses.replace(
        fresh, hit=dataclasses.replace(fresh.hit, similar={stale.hit.id: 0.5})
    )
    default = HeldTurnsLast()
    assert [c.hit.id.int for c in await default(asked, [near, stale, other])] == [2, 3, 1]
    close = dataclasses.replace(
        fresh, hit=dataclasses.replace(fresh.hit, similar={stale.hit.id: 0.7})
    )
    assert [c.hit.id.int for c in await default(asked, [close, stale, other])] == [3, 1, 2]
    # Not rewritten (nothing held), no session, or asked of the conversation itself: as ranked.
    itself = spec(session_id="now", held=frozenset({7, 8}), session_ids=("now", "earlier"))
    assert await stage(itself, pool) == pool
    assert await stage(spec(session_id="now"), pool) == pool
    assert await stage(spec(held=frozenset({7, 8})), pool) == pool


async def test_stages_run_in_order_over_the_pool_then_top_k() -> None:
    pool = score(spec(), ranked([hit(n) for n in range(10)]))
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


async def test_min_relevance_keeps_summaries_asked_for_by_period() -> None:
    spec = SearchSpec(tenant_id="t", user_id="u", query="last week?", top_k=5, min_relevance=0.5)
    low_memory = Candidate(hit(1), semantic=0.1, recency=1.0, importance=0.5, score=0.2)
    summary = Candidate(
        hit(2, kind="summary"), semantic=0.1, recency=1.0, importance=0.5, score=0.2
    )
    kept = await MinRelevance()(spec, [low_memory, summary])
    assert [c.hit.id for c in kept] == [summary.hit.id]


WORDS = ["hike", "Alps", "dumplings", "Lisbon", "guitar", "吉他", "北京", "烤鸭", "ticket",
         "visa", "sister", "Maria", "ok", "yes", "when", "where", "yesterday", "上周", "哪里",
         "什么时候", "in 2026", "2025年3月"]  # fmt: skip


@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=8),  # content words
            st.sampled_from([None, "user", "assistant"]),
            st.booleans(),  # ends with a question mark
            st.lists(st.floats(-1, 1), min_size=3, max_size=3),  # dense
            st.lists(st.floats(-1, 1), min_size=3, max_size=3),  # turn
            st.floats(0, 3000),  # days old
            st.floats(0, 1),  # importance
            st.integers(0, 50),  # access count
            st.booleans(),  # pinned
        ),
        max_size=40,
    ),
    st.lists(st.sampled_from(WORDS), max_size=5),  # query words
    st.integers(0, 60),  # the user's highest access count
    st.tuples(st.floats(0, 10), st.floats(0, 10), st.floats(0, 10)),
)
def test_scores_stay_in_the_unit_interval_and_rank_best_first(
    rows: list[
        tuple[list[str], str | None, bool, list[float], list[float], float, float, int, bool]
    ],
    query_words: list[str],
    max_access: int,
    weights: tuple[float, float, float],
) -> None:
    hits = []
    for n, (words, role, asks, dense, turn, age, imp, acc, pin) in enumerate(rows):
        text = " ".join(words) + ("?" if asks else ".")
        content = f"{role}: {text}" if role else text
        extra: dict[str, Any] = {"role": role} if role else {}
        hits.append(
            hit(
                n,
                content=content,
                dense=dense,
                turn=turn,
                days_old=age,
                importance=imp,
                access_count=acc,
                pinned=int(pin),
                **extra,
            )
        )
    query = " ".join(query_words) or "q"
    q_terms = frozenset(terms.term_id(t) for t in terms.tokenize(query))
    pool = Pool(CandidateLists(hits, hits[::-1][::2]), max_access, QUERY, q_terms)
    out = score(spec(query=query, weights=scoring.Weights(*weights), top_k=40), pool)
    assert len(out) == len({h.id for h in hits})
    for c in out:
        assert all(0.0 <= x <= 1.0 for x in (c.semantic, c.recency, c.importance, c.score, c.own))
    assert all(a.score >= b.score for a, b in itertools.pairwise(out))


# The bundled calibration's log-odds at cosines (turn 1, chunk 1) and (turn 0, chunk 1),
# no shared term, after the shift: -3.049 + 7.987 - 8.944 + 6.3 and 7.987 - 8.944 + 6.3.
_Z_OWN, _Z_CONTEXT = 2.294, 5.343
_COVERED = 3.293 + 3.060  # every query term in its own text and its indexed terms


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def test_the_score_of_an_own_match_by_hand() -> None:
    """Rank one in both lists (fused 1), own vector as close as the indexed one (own match
    1, no penalty), 10 days old, importance 0.5, used 5 times of the user's 10: the
    default weights 0.9 / 0.05 / 0.05, relevance share ½, λ 0.01, intrinsic share 0.7."""
    (c,) = score(spec(), ranked([hit(1, days_old=10, access_count=5)], max_access=10))
    rel = _sigmoid(_Z_OWN)
    assert c.semantic == pytest.approx(rel, abs=1e-12)
    assert c.own == 1.0
    assert c.recency == pytest.approx(math.exp(-0.1), abs=1e-12)
    assert c.importance == pytest.approx(0.7 * 0.5 + 0.3 * 0.5, abs=1e-12)
    key = 0.5 * 1.0 + 0.5 * rel
    want = 0.9 * key + 0.05 * math.exp(-0.1) + 0.05 * 0.5
    assert c.score == pytest.approx(want, abs=1e-12)


def test_the_score_of_a_short_context_only_match_by_hand() -> None:
    """Matched only through its context (own turn vector orthogonal to the query: own
    match 0, ×0.5) and short (two index terms, ×0.8); new, never used."""
    short = hit(2, content="memory about the Alps", turn=[0.0, 1.0, 0.0])
    (c,) = score(spec(), ranked([short]))
    rel = _sigmoid(_Z_CONTEXT)
    assert c.semantic == pytest.approx(rel, abs=1e-12)
    assert c.own == 0.0
    assert c.recency == 1.0
    assert c.importance == pytest.approx(0.35, abs=1e-12)
    key = 0.5 * (1.0 * 0.5 * 0.8) + 0.5 * rel
    assert c.score == pytest.approx(0.9 * key + 0.05 * 1.0 + 0.05 * 0.35, abs=1e-12)


def test_the_score_of_a_sparse_only_term_match_by_hand() -> None:
    """Only on the sparse list (fused 1/10 of the best 1/11 + 1/10, k 10, dense weight ½)
    with every query term its own, scored on relevance alone."""
    query = "long hike alps"
    q_terms = frozenset(terms.term_id(t) for t in terms.tokenize(query))
    h = hit(3)
    pool = Pool(CandidateLists([], [h]), 0, QUERY, q_terms)
    (c,) = score(spec(query=query, weights=scoring.Weights(1, 0, 0)), pool)
    rel = _sigmoid(_Z_OWN + _COVERED)
    assert c.semantic == pytest.approx(rel, abs=1e-12)
    fused = (1 / 10) / (1 / 11 + 1 / 10)
    assert c.score == pytest.approx(0.5 * fused + 0.5 * rel, abs=1e-12)


@given(
    st.lists(
        st.tuples(
            st.booleans(),  # states a change
            st.integers(0, 60),  # days old
            st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0]), min_size=3, max_size=3),
        ),
        min_size=2,
        max_size=12,
    )
)
def test_newer_facts_first_moves_as_promote_changes_over_every_vector(
    rows: list[tuple[bool, int, list[float]]],
) -> None:
    """The order is the one `promote_changes` gives with every candidate's turn vector,
    whether the stage compares the hits' stored vectors or reads the similar hits the
    index found (hits without vectors, as the embedded index returns them). Only the
    statements of a change move here (statements without a change word: below)."""
    hits = [
        hit(
            n,
            days_old=days,
            turn=v if any(v) else None,
            content=f"I changed the plan {n} instead" if changes else f"the plan {n} holds",
        )
        for n, (changes, days, v) in enumerate(rows)
    ]
    pool = [Candidate(h, 0.5, 1.0, 0.5, 1.0 - n / 100) for n, h in enumerate(hits)]
    vectors = [_unit(h.vectors.turn) if h.vectors else None for h in hits]
    # Hits of one day are ordered by their place in the session (`_said_at`).
    items = [
        ranking.Statement(
            created_at=h.payload.created_at.timestamp() + h.payload.sources[0]["seq"] * 1e-6,
            changes=ranking.states_change(h.payload.text),
        )
        for h in hits
    ]
    expected = ranking.promote_changes(items, ranking.similar_by_vectors(vectors.__getitem__, 0.4))
    out = asyncio.run(NewerFactsFirst(0.4, restate_similarity=None)(spec(), pool))
    assert [c.hit.id.int for c in out] == expected

    # As the embedded index returns them: no vectors, and for a hit that states a change
    # the other hits whose turn vector is similar to its own.
    def similar_to(n: int) -> dict[uuid.UUID, float] | None:
        own = vectors[n]
        if not items[n].changes:
            return None
        if own is None:
            return {}
        return {
            h.id: float(v @ own)
            for k, h in enumerate(hits)
            if k != n and (v := vectors[k]) is not None and float(v @ own) >= 0.4
        }

    bare = [
        dataclasses.replace(
            c,
            hit=dataclasses.replace(
                c.hit,
                vectors=StoredVectors((), (), c.hit.vectors.sparse_ids if c.hit.vectors else ()),
                cosines=(0.5, 0.5),
                similar=similar_to(n),
            ),
        )
        for n, c in enumerate(pool)
    ]
    out = asyncio.run(NewerFactsFirst(0.4, restate_similarity=None)(spec(), bare))
    assert [c.hit.id.int for c in out] == expected


def _statement(
    n: int, content: str, days_old: float, turn: list[float], role: str = "user"
) -> VectorHit:
    return hit(n, days_old=days_old, turn=turn, content=f"{role}: {content}", role=role)


def _ranked(*hits: VectorHit, semantic: Sequence[float] = ()) -> list[Candidate]:
    return [
        Candidate(h, semantic[n] if semantic else 0.8, 1.0, 0.5, 1.0 - n / 100)
        for n, h in enumerate(hits)
    ]


# Two turn vectors at cosine 0.6: above the 0.5 a statement without a change word needs.
_OLD_TURN = [1.0, 0.0, 0.0]
_NEW_TURN = [0.6, 0.8, 0.0]


def test_a_newer_statement_without_a_change_word_answers_a_question_about_now() -> None:
    """ "sold the civic and got a used model 3" goes above "my car is a 2012 honda civic"
    for "what am i driving these days?", not for "what did i drive before?"."""
    old = _statement(1, "my car is a 2012 honda civic, what oil should i use?", 28, _OLD_TURN)
    new = _statement(2, "sold it last weekend and got a used model 3", 2, _NEW_TURN)
    stage = NewerFactsFirst(0.4)
    now = asyncio.run(stage(spec(query="what am i driving these days?"), _ranked(old, new)))
    assert [c.hit.id.int for c in now] == [2, 1]
    past = asyncio.run(stage(spec(query="what did i drive before?"), _ranked(old, new)))
    assert [c.hit.id.int for c in past] == [1, 2]
    # Turned off, or for a question about a period: as ranked.
    off = NewerFactsFirst(0.4, restate_similarity=None)
    same = asyncio.run(off(spec(query="what am i driving these days?"), _ranked(old, new)))
    assert [c.hit.id.int for c in same] == [1, 2]
    period = spec(query="what am i driving?", created_from=NOW - timedelta(days=60))
    assert [c.hit.id.int for c in asyncio.run(stage(period, _ranked(old, new)))] == [1, 2]


@pytest.mark.parametrize(
    ("new_text", "role", "semantic", "turn"),
    [
        # says it adds to the older one
        ("turns out i'm also allergic to shellfish", "user", 0.8, _NEW_TURN),
        ("发现我对猫毛也过敏", "user", 0.8, _NEW_TURN),
        # the assistant's words are not the user's new fact
        ("Sounds like you drive a model 3 now", "assistant", 0.8, _NEW_TURN),
        # far less relevant than the older one (0.3 of 0.8), or not confidently relevant
        ("got a used model 3", "user", 0.3, _NEW_TURN),
        ("got a used model 3", "user", 0.2, _NEW_TURN),
        # not similar enough (cosine 0.45)
        ("got a used model 3", "user", 0.8, [0.45, 0.893, 0.0]),
    ],
)
def test_a_newer_statement_without_a_change_word_stays_put(
    new_text: str, role: str, semantic: float, turn: list[float]
) -> None:
    old = _statement(1, "i'm allergic to penicillin, my car is a civic", 30, _OLD_TURN)
    new = _statement(2, new_text, 3, turn, role=role)
    out = asyncio.run(
        NewerFactsFirst(0.4)(
            spec(query="what is it now?"), _ranked(old, new, semantic=(0.8, semantic))
        )
    )
    assert [c.hit.id.int for c in out] == [1, 2]


def test_a_change_announced_brings_the_users_next_turn_along() -> None:
    """ "coach changed the schedule again smh" goes above the old schedule, and the user's
    next turn in that session (the new schedule, after the assistant's question) just
    below it; a user turn further on, or in another session, stays where it ranked."""

    def turn(
        n: int, text: str, days: float, session: str, seq: int, role: str = "user"
    ) -> VectorHit:
        return hit(
            n,
            days_old=days,
            turn=_NEW_TURN if n == 2 else _OLD_TURN,
            content=f"{role}: {text}",
            role=role,
            session_id=session,
            sources=[{"session_id": session, "message_id": f"m{seq}", "seq": seq}],
        )

    old = turn(1, "maya's soccer practice is tuesdays and thursdays at 5", 15, "a", 1)
    echo = turn(5, "Got it, Tue/Thu at 5.", 15, "a", 2, role="assistant")
    announced = turn(2, "coach changed the schedule again smh", 4, "b", 1)
    later = turn(6, "anyway she scored twice", 4, "b", 5)
    told = turn(3, "mondays and wednesdays 4:30", 4, "b", 3)
    elsewhere = turn(4, "mondays are busy", 4, "c", 3)
    ranked_in = _ranked(old, echo, later, elsewhere, told, announced)
    stage = NewerFactsFirst(0.4, restate_similarity=None)
    out = asyncio.run(stage(spec(query="when is my kid's soccer?"), ranked_in))
    assert [c.hit.id.int for c in out] == [2, 3, 1, 5, 6, 4]
    # Asked about someone else (LoCoMo's speakers), only the announcement moves.
    out = asyncio.run(stage(spec(query="When is Maya's soccer?"), ranked_in))
    assert [c.hit.id.int for c in out] == [2, 1, 5, 6, 4, 3]


def test_a_newer_statement_about_another_pet_does_not_answer_for_the_first() -> None:
    """ "we adopted a kitten!! her name is pepper" restates no name of "my dog"."""
    dog = _statement(1, "my dog biscuit ate an entire sock today", 55, _OLD_TURN)
    kitten = _statement(2, "we adopted a kitten!! her name is pepper", 12, _NEW_TURN)
    stage = NewerFactsFirst(0.4)
    out = asyncio.run(stage(spec(query="what's my dog's name?"), _ranked(dog, kitten)))
    assert [c.hit.id.int for c in out] == [1, 2]
    out = asyncio.run(stage(spec(query="what's my pet's name?"), _ranked(dog, kitten)))
    assert [c.hit.id.int for c in out] == [2, 1]


def test_a_statement_about_someone_else_replaces_nothing() -> None:
    """ "my brother just moved to austin" (a change word, and similar) stays below "my
    sister lives in denver"; the same news about the sister goes above it."""
    sister = _statement(1, "my sister lives in denver, visiting her next month", 27, _OLD_TURN)
    brother = _statement(2, "my brother just moved to austin", 4, _NEW_TURN)
    moved = _statement(3, "my sister just moved to austin", 4, _NEW_TURN)
    stage = NewerFactsFirst(0.4)
    asked = spec(query="which city is my sister in?")
    out = asyncio.run(stage(asked, _ranked(sister, brother)))
    assert [c.hit.id.int for c in out] == [1, 2]
    out = asyncio.run(stage(asked, _ranked(sister, moved)))
    assert [c.hit.id.int for c in out] == [3, 1]


def test_a_memorys_cached_terms_are_its_distinct_index_terms_packed() -> None:
    """`text_facts` keeps a text's terms as packed ids (~0.7 kB an entry), not a frozenset
    of Python ints (~2.4 kB), and the rest of what scoring asks of it."""
    content = "Ana: I moved to Lisbon, Lisbon! 我搬到了里斯本"
    facts = text_facts(content, "user")
    assert isinstance(facts.terms, array)
    ids = {terms.term_id(t) for t in terms.tokenize(content)}
    assert list(facts.terms) == sorted(ids)
    own = "I moved to Lisbon, Lisbon! 我搬到了里斯本"
    assert facts.own_terms == len(terms.tokenize(own))
    assert facts.language == ranking.language(own)
    assert facts.states_change == ranking.states_change(own)
    assert not facts.asks_only(3)


@pytest.mark.parametrize(
    ("content", "role"),
    [
        ("assistant: Where did you move?", "assistant"),
        ("assistant: Where did you move to after the long summer in Porto?", "assistant"),
        ("assistant: 你搬到哪里了？", "assistant"),
        ("user: Where did you move?", "user"),
        ("assistant:   Really?  ", "assistant"),
        ("assistant: I changed my booking to Friday instead.", "assistant"),
        ("Ana: 我不再住在北京了", "user"),
    ],
)
def test_text_facts_agree_with_the_ranking_rules(content: str, role: str) -> None:
    """One memo in place of three: each fact is the rule's own answer on the memory's text."""
    facts = text_facts(content, role)
    own = content.partition(": ")[2]
    for max_terms in (1, 3, 4, 8):
        assert facts.asks_only(max_terms) == ranking.asks_only(role, own, max_terms)
    assert facts.language == ranking.language(own)
    assert facts.states_change == ranking.states_change(own)


_WORDS = "Ana Lisbon moved I the 北京 我搬到了里斯本 不再 改成 好的 İstanbul café 42 2023年 instead"
_MARKS = ["?", "？", ": ", ":", " ", "  ", "\n", "_", "-", "a:b", "x_y", "Moved"]
_PIECES = st.sampled_from([*_WORDS.split(), *_MARKS])


@given(
    speaker=st.lists(_PIECES, max_size=3).map("".join),
    text=st.lists(_PIECES, max_size=12).map("".join),
    role=st.sampled_from(["user", "assistant", None]),
)
def test_text_facts_tokenize_once_and_say_what_three_tokenizations_said(
    speaker: str, text: str, role: str | None
) -> None:
    """`text_facts` tokenizes a memory once; its facts are those of tokenizing the whole
    content, the own text and the stripped text apart, as it did before (speakers and
    texts that hold ": ", underscores, CJK next to Latin, nothing at all)."""
    content = f"{speaker}: {text}" if role is not None else text
    facts = text_facts.__wrapped__(content, role)
    own = MemoryPayload.text_of(content, role)
    assert list(facts.terms) == sorted({terms.term_id(t) for t in terms.tokenize(content)})
    assert facts.own_terms == len(terms.tokenize(own))
    question = role == "assistant" and own.strip().endswith(("?", "？"))
    assert facts.question_terms == (len(terms.tokenize(own.strip())) if question else None)
    assert facts.language == ranking.language(own)


@given(st.lists(_PIECES, max_size=16).map("".join))
def test_the_language_counts_characters_over_runs(text: str) -> None:
    """`ranking.language` counts CJK and Latin letters run by run: the share of one match
    a character, as before."""
    ranges = (("\u3400", "\u4dbf"), ("\u4e00", "\u9fff"), ("\uf900", "\ufaff"))
    cjk = sum(1 for ch in text if any(lo <= ch <= hi for lo, hi in ranges))
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha())
    share = cjk / (cjk + latin / 4) if cjk + latin else 0.0
    expected = "zh" if share > 0.8 else "en" if share < 0.2 or not cjk + latin else "mixed"
    assert ranking.language(text) == expected


def test_relevance_weights_for_another_encoder_replace_the_bundled_calibration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fitted for another encoder (its cosines on a scale of their own), from the
    environment's JSON: those coefficients, and no cross-language map."""
    weights = {"cos_turn": 1.0, "cos_chunk": 2.0, "cov_own": 0.5, "cov_chunk": 0.25, "bias": -9.0}
    monkeypatch.setenv("STRATA_RELEVANCE_WEIGHTS", json.dumps(weights))
    own = Score(score_config(Settings(_env_file=None)))
    near = [0.9, 0.43589, 0.0]  # cosine 0.9 with QUERY
    zh = hit(1, content="我上个月搬到了里斯本", dense=near, turn=near)
    en = hit(2, content="I moved to Lisbon last month", dense=near, turn=near)
    pool = Pool(CandidateLists([zh, en], []), 0, QUERY, frozenset())
    got = {c.hit.id.int: c.semantic for c in own(spec(query="where do I live"), pool)}
    want = relevance.sigmoid(1.0 * 0.9 + 2.0 * 0.9 - 9.0 + relevance.PLAIN_COVERAGE.shift)
    assert abs(got[2] - want) < 1e-6
    assert abs(got[1] - want) < 1e-6  # the Chinese memory too: no map
    bundled = {c.hit.id.int: c.semantic for c in score(spec(query="where do I live"), pool)}
    assert bundled[2] != got[2]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"cos_turn": 1.0}, "needs exactly the keys"),
        (
            {"cos_turn": 1, "cos_chunk": 1, "cov_own": 1, "cov_chunk": 1, "bias": 1, "x": 1},
            "needs exactly the keys",
        ),
        (
            {"cos_turn": 1, "cos_chunk": 1, "cov_own": 1, "cov_chunk": 1, "bias": math.inf},
            "finite",
        ),
    ],
)
def test_relevance_weights_are_all_five_and_finite(weights: dict[str, float], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(_env_file=None, relevance_weights=weights)


def _exchange(n: int, text: str, session: str, seq: int, role: str) -> VectorHit:
    return hit(
        n,
        content=f"{role}: {text}",
        role=role,
        session_id=session,
        sources=[{"session_id": session, "message_id": f"m{seq}", "seq": seq}],
    )


@pytest.mark.parametrize(
    ("question", "said", "semantic", "first"),
    [
        # the user's words above the reply they drew
        ("when do i usually work out?", "tues and thurs evenings is the routine lately", 0.7, 2),
        ("我早上一般喝点啥？", "早上不来杯美式根本醒不过来", 0.7, 2),
        # a question about what the assistant said: the reply is the answer
        ("what did you recommend for my evenings?", "tues and thurs evenings lately", 0.7, 1),
        # about someone of theirs, naming no speaker
        ("whats his number?", "guy named marco, his number is 555-0142", 0.7, 2),
        # the user's turn asked, so the reply answers it
        ("what should I see in Rome?", "I'm going to Rome, what should I see?", 0.7, 1),
        # ... but what it told before asking is the user's own fact
        ("where am i going this spring?", "I'm going to Rome, what should I see?", 0.7, 2),
        (
            "what medication am i taking for my blood pressure?",
            "i'm on lisinopril for blood pressure, is it ok to take ibuprofen?",
            0.7,
            2,
        ),
        # ... unless the question asks for advice, or the turn told nothing first
        (
            "what should i take for a headache?",
            "i'm on lisinopril for blood pressure, is it ok to take ibuprofen?",
            0.7,
            1,
        ),
        ("where am i going this spring?", "thanks so much, what should I see?", 0.7, 1),
        # ... also without its question mark
        ("where do i park at the airport?", "should i park or use the cell phone lot", 0.7, 1),
        # the user's turn is not relevant enough on its own
        ("when do i usually work out?", "lol yeah", 0.1, 1),
        # nor about whom the question asks
        ("我家猫叫啥名字？", "又领养了一只小狗，叫汤圆", 0.7, 1),
    ],
)
def test_the_users_own_words_go_above_the_reply_to_them(
    question: str, said: str, semantic: float, first: int
) -> None:
    reply = _exchange(1, "Nice work! Evening sessions can feel stronger too.", "s", 4, "assistant")
    turn = _exchange(2, said, "s", 3, "user")
    other = _exchange(3, "unrelated reply", "s", 9, "assistant")
    pool = _ranked(reply, other, turn, semantic=(0.95, 0.5, semantic))
    out = asyncio.run(UserWordsFirst()(spec(query=question), pool))
    ids = [c.hit.id.int for c in out]
    assert ids[0] == first
    assert ids.index(3) > ids.index(1)  # nothing else moves


def test_a_question_naming_a_speaker_leaves_the_replies_where_they_ranked() -> None:
    """LoCoMo's speakers are `user` and `assistant` by role and named in the text: "What
    did Melanie paint?" is answered by the second speaker's turns."""

    def said(n: int, name: str, text: str, seq: int, role: str) -> VectorHit:
        return hit(
            n,
            content=f"{name}: {text}",
            role=role,
            session_id="s",
            sources=[{"session_id": "s", "message_id": f"m{seq}", "seq": seq}],
        )

    reply = said(1, "Melanie", "I painted a lake at sunrise last week!", 4, "assistant")
    turn = said(2, "Caroline", "I love the paintings you showed me, Mel.", 3, "user")
    pool = _ranked(reply, turn, semantic=(0.9, 0.7))
    out = asyncio.run(UserWordsFirst()(spec(query="What did Melanie paint?"), pool))
    assert [c.hit.id.int for c in out] == [1, 2]
    # Naming no one who speaks, the user's words go first (as for everyday chat).
    out = asyncio.run(UserWordsFirst()(spec(query="what did she paint?"), pool))
    assert [c.hit.id.int for c in out] == [2, 1]


def test_a_reply_that_adds_a_number_or_a_name_stays_above_the_turn() -> None:
    """ "太平洋那款的等待期是九十天" answers 等待期是多久 itself; and a turn far below its
    reply stays where it ranked (moving it would push down every result between)."""
    reply = _exchange(1, "重疾险对长辈很重要。太平洋那款的等待期是九十天。", "s", 8, "assistant")
    turn = _exchange(2, "另外我还给我爸妈各买了一份重疾险，是太平洋保险的。", "s", 7, "user")
    pool = _ranked(reply, turn, semantic=(0.97, 0.94))
    out = asyncio.run(UserWordsFirst()(spec(query="我给爸妈买的保险等待期是多久？"), pool))
    assert [c.hit.id.int for c in out] == [1, 2]
    plain = _exchange(1, "Nice work! Evening sessions can feel stronger too.", "s", 4, "assistant")
    mine = _exchange(2, "tues and thurs evenings is the routine lately", "s", 3, "user")
    between = [_exchange(n, f"other {n}", "t", n, "assistant") for n in range(3, 7)]
    far = _ranked(plain, *between, mine)
    out = asyncio.run(UserWordsFirst()(spec(query="when do i usually work out?"), far))
    assert out[0].hit.id.int == 1
    near = _ranked(plain, *between[:2], mine, *between[2:])
    out = asyncio.run(UserWordsFirst()(spec(query="when do i usually work out?"), near))
    assert out[0].hit.id.int == 2


def test_a_reply_that_adds_a_number_beside_the_time_asked_goes_below_the_turn() -> None:
    """ "睡七个半小时左右，挺健康的。" adds a number, but not the clock time 我平时几点起床
    asks, which the turn it replies to tells ("最近每天11点睡，6点半起"); a reply that tells
    a clock time of its own stays above."""
    turn = _exchange(2, "最近每天11点睡，6点半起", "s", 3, "user")
    for text, first in (("睡七个半小时左右，挺健康的。", 2), ("那可以试试5点半起床。", 1)):
        reply = _exchange(1, text, "s", 4, "assistant")
        pool = _ranked(reply, turn, semantic=(0.9, 0.8))
        out = asyncio.run(UserWordsFirst()(spec(query="我平时几点起床"), pool))
        assert out[0].hit.id.int == first, text


def test_asked_for_a_time_only_a_statement_naming_one_restates() -> None:
    """ "我朋友推荐我在成都去看大熊猫基地" is no new departure time for 几点起飞."""
    old = _statement(1, "航班订了国航，早上八点二十起飞", 30, _OLD_TURN)
    vague = _statement(2, "我朋友推荐我在成都去看大熊猫基地", 3, _NEW_TURN)
    timed = _statement(3, "航班是下午三点的", 3, _NEW_TURN)
    stage = NewerFactsFirst(0.4)
    asked = spec(query="我去成都的航班几点起飞？")
    assert [c.hit.id.int for c in asyncio.run(stage(asked, _ranked(old, vague)))] == [1, 2]
    assert [c.hit.id.int for c in asyncio.run(stage(asked, _ranked(old, timed)))] == [3, 1]


def test_an_announced_change_brings_no_unrelated_next_turn() -> None:
    """The next turn comes along only if it is relevant itself (a review's find: "lol my
    cat threw up on the rug", 0.11, went second)."""

    def turn(n: int, text: str, days: float, seq: int) -> VectorHit:
        return hit(
            n,
            days_old=days,
            turn=_NEW_TURN if n == 2 else _OLD_TURN,
            content=f"user: {text}",
            role="user",
            session_id="b" if days < 10 else "a",
            sources=[
                {"session_id": "b" if days < 10 else "a", "message_id": f"m{seq}", "seq": seq}
            ],
        )

    old = turn(1, "our standup is at 10 every day", 20, 1)
    announced = turn(2, "my boss moved our standup to 9 again", 3, 1)
    cat = turn(3, "lol my cat threw up on the rug", 3, 3)
    stage = NewerFactsFirst(0.4, restate_similarity=None)
    pool = _ranked(old, cat, announced, semantic=(0.8, 0.11, 0.7))
    out = asyncio.run(stage(spec(query="what time is my standup?"), pool))
    assert [c.hit.id.int for c in out] == [2, 1, 3]


def test_restating_leaves_held_turns_weak_statements_and_the_assistant_alone() -> None:
    """A conversation's own turn (held), a statement under 0.25, and an older statement of
    the assistant's are no part of restating; a question naming a speaker of the results
    (LoCoMo's) has none, unless it is about the user."""
    stage = NewerFactsFirst(0.4)
    old = _statement(1, "my car is a 2012 honda civic", 28, _OLD_TURN)
    new = _statement(2, "got a used model 3 last weekend", 2, _NEW_TURN)
    now = spec(query="what am i driving these days?")
    # held: the newer turn is one the rewrite read in this conversation
    held = dataclasses.replace(now, session_id="s1", held=frozenset({2}))
    assert [c.hit.id.int for c in asyncio.run(stage(held, _ranked(old, new)))] == [1, 2]
    assert [c.hit.id.int for c in asyncio.run(stage(now, _ranked(old, new)))] == [2, 1]
    # weak: 0.2 is under 0.25, though 0.8 of the older's 0.25
    weak = _ranked(old, new, semantic=(0.25, 0.2))
    assert [c.hit.id.int for c in asyncio.run(stage(now, weak))] == [1, 2]
    # the older one is the assistant's
    said = _statement(1, "You drive a 2012 honda civic", 28, _OLD_TURN, role="assistant")
    assert [c.hit.id.int for c in asyncio.run(stage(now, _ranked(said, new)))] == [1, 2]
    # a named speaker: "What is Caroline driving?" over "Caroline: …"
    c_old = hit(1, days_old=28, turn=_OLD_TURN, content="Caroline: my car is a civic", role="user")
    c_new = hit(2, days_old=2, turn=_NEW_TURN, content="Caroline: got a model 3", role="user")
    named = asyncio.run(stage(spec(query="What is Caroline driving?"), _ranked(c_old, c_new)))
    assert [c.hit.id.int for c in named] == [1, 2]
    mine = asyncio.run(stage(spec(query="what am i driving?"), _ranked(c_old, c_new)))
    assert [c.hit.id.int for c in mine] == [2, 1]


def test_the_told_turn_is_the_users_next_one_only() -> None:
    """A user turn two exchanges on (seq + 4) is no telling of the announced change."""

    def turn(n: int, text: str, days: float, session: str, seq: int) -> VectorHit:
        return hit(
            n,
            days_old=days,
            turn=_NEW_TURN if n == 2 else _OLD_TURN,
            content=f"user: {text}",
            role="user",
            session_id=session,
            sources=[{"session_id": session, "message_id": f"m{seq}", "seq": seq}],
        )

    old = turn(1, "maya's practice is tuesdays at 5", 15, "a", 1)
    announced = turn(2, "coach changed the schedule again smh", 4, "b", 1)
    later = turn(3, "mondays and wednesdays 4:30", 4, "b", 5)
    stage = NewerFactsFirst(0.4, restate_similarity=None)
    out = asyncio.run(stage(spec(query="when is my kid's soccer?"), _ranked(old, later, announced)))
    assert [c.hit.id.int for c in out] == [2, 1, 3]


def _thread_turn(
    n: int, text: str, seq: int, turn: list[float], session: str = "s", role: str = "user"
) -> VectorHit:
    """A turn of one conversation, a minute apart, with its own turn vector."""
    return hit(
        n,
        days_old=1 - seq / (24 * 60),
        turn=turn,
        content=f"{role}: {text}",
        role=role,
        session_id=session,
        sources=[{"session_id": session, "message_id": f"m{seq}", "seq": seq}],
    )


# Two turn vectors at cosine 0.3: under the 0.4 a change needs across conversations, over
# the 0.25 it needs a few turns after the statement it follows.
_FAR_TURN = [0.3, 0.954, 0.0]


@pytest.mark.parametrize(
    ("text", "session", "seq", "moves"),
    [
        # a change word, two turns on in the same conversation
        ("oh wait we just moved last week, its 88 harbor rd", "s", 3, True),
        # a statement of now counts there too
        ("its 88 harbor rd now", "s", 3, True),
        # in another conversation the cosine is too low
        ("oh wait we just moved last week, its 88 harbor rd", "t", 3, False),
        # and so it is further on in the same one
        ("oh wait we just moved last week, its 88 harbor rd", "s", 7, False),
        # a statement of now without a thread replaces nothing
        ("its 88 harbor rd now", "t", 3, False),
    ],
)
def test_a_change_a_few_turns_on_replaces_the_statement_it_follows(
    text: str, session: str, seq: int, moves: bool
) -> None:
    """In one conversation the user's next words are on its topic more often than their
    words show (cosine 0.3 here): "oh wait we just moved …" goes above "my address is 14 elm
    st apt 2" for "where do i live?"."""
    old = _thread_turn(1, "my address is 14 elm st apt 2", 1, _OLD_TURN)
    new = _thread_turn(2, text, seq, _FAR_TURN, session=session)
    out = asyncio.run(NewerFactsFirst(0.4)(spec(query="where do i live?"), _ranked(old, new)))
    assert [c.hit.id.int for c in out] == ([2, 1] if moves else [1, 2])


def test_a_correction_replaces_the_statement_of_the_thread_closest_to_it() -> None:
    """ "actually i got a new one, 555-0142" corrects "my phone number is 555-0198" (0.68),
    not "thurs 7ish" (0.39) a turn before, for "what time is my dentist appointment?"."""
    time = _thread_turn(1, "thurs 7ish", 3, [1.0, 0.0, 0.0])
    phone = _thread_turn(3, "my phone number is 555-0198", 4, [0.39, 0.0, 0.921])
    fix = _thread_turn(2, "actually i got a new one, 555-0142", 6, [0.39, 0.639, 0.663])
    stage = NewerFactsFirst(0.4, restate_similarity=0.9)
    q = spec(query="what time is my dentist appointment?")
    out = asyncio.run(stage(q, _ranked(time, fix, phone)))
    assert [c.hit.id.int for c in out] == [1, 2, 3]
    out = asyncio.run(stage(spec(query="what's my phone number?"), _ranked(phone, time, fix)))
    assert out[0].hit.id.int == 2


def test_a_correction_in_a_thread_is_the_users_own_not_about_someone_else() -> None:
    """ "sorry not lincoln center lol, it's the school auditorium, i was thinking of last
    year" corrects "my daughter's recital is at lincoln center": its "i" is the user who
    got it wrong, not another person than the daughter. A statement of now about the user
    that corrects nothing stays below."""
    old = _thread_turn(1, "my daughter's recital is at lincoln center", 1, _OLD_TURN)
    for text, moves in (
        (
            "sorry not lincoln center lol, it's the school auditorium, i was thinking of last year",
            True,
        ),
        ("i'm at the school auditorium now", False),
        ("sorry not lincoln center, my son's is at the school auditorium", False),
        # a correction of something else (a request) shares no word with the statement
        ("no sorry, i wasn't clear, i meant an email about the field trip", False),
    ):
        new = _thread_turn(2, text, 3, _NEW_TURN)
        stage = NewerFactsFirst(0.4, restate_similarity=0.9)  # no restating here
        out = asyncio.run(stage(spec(query="where's the recital"), _ranked(old, new)))
        assert [c.hit.id.int for c in out] == ([2, 1] if moves else [1, 2]), text


def test_a_statement_of_now_replaces_only_in_a_thread() -> None:
    """ "we see dr nakamura now" (cosine 0.6) goes above "emma's allergist is dr reyes"
    two turns before it; said in another conversation, "now" is no change word."""
    old = _thread_turn(1, "emma's allergist is dr reyes", 1, _OLD_TURN)
    for session, moves in (("s", True), ("t", False)):
        new = _thread_turn(2, "we see dr nakamura now", 3, _NEW_TURN, session=session)
        stage = NewerFactsFirst(0.4, restate_similarity=0.9)  # no restating here
        out = asyncio.run(stage(spec(query="who is emma's allergist?"), _ranked(old, new)))
        assert [c.hit.id.int for c in out] == ([2, 1] if moves else [1, 2])


def test_a_new_value_keeps_half_the_relevance_of_the_one_it_replaces() -> None:
    """ "复查完医生说加到一片" (0.08) answers 优甲乐现在一次吃多少 as "我每天吃半片优甲乐"
    (0.97) did: the relevance floor, after this stage, must not drop it and keep the old."""
    old = _thread_turn(1, "我每天吃半片优甲乐", 1, _OLD_TURN)
    new = _thread_turn(2, "复查完医生说加到一片", 5, _FAR_TURN)
    out = asyncio.run(
        NewerFactsFirst(0.4)(
            spec(query="优甲乐现在一次吃多少"), _ranked(old, new, semantic=(0.97, 0.08))
        )
    )
    assert [c.hit.id.int for c in out] == [2, 1]
    assert out[0].semantic == pytest.approx(0.485)
    assert out[1].semantic == pytest.approx(0.97)
    kept = asyncio.run(MinRelevance()(spec(query="q", min_relevance=0.1), out))
    assert [c.hit.id.int for c in kept] == [2, 1]


def test_the_users_answer_goes_above_the_assistants_question() -> None:
    """ "后端接口" answers "时间挺紧的，你负责哪块？" for 我在项目里负责什么; a reaction
    ("要") does not, nor a reply to a turn that did not ask."""
    opener = _exchange(3, "我们组在做一个新的会员积分系统，月底要上线", "s", 1, "user")
    asked = _exchange(1, "时间挺紧的，你负责哪块？", "s", 2, "assistant")
    answer = _exchange(2, "后端接口", "s", 3, "user")
    pool = _ranked(asked, opener, answer, semantic=(0.67, 0.23, 0.59))
    out = asyncio.run(UserWordsFirst()(spec(query="我在项目里负责什么"), pool))
    assert [c.hit.id.int for c in out][:2] == [2, 1]
    react = _exchange(2, "要", "s", 3, "user")
    pool = _ranked(asked, opener, react, semantic=(0.67, 0.23, 0.59))
    out = asyncio.run(UserWordsFirst()(spec(query="我在项目里负责什么"), pool))
    assert [c.hit.id.int for c in out].index(1) < [c.hit.id.int for c in out].index(2)
    told = _exchange(1, "时间挺紧的，注意身体。", "s", 2, "assistant")
    pool = _ranked(told, opener, answer, semantic=(0.67, 0.23, 0.59))
    out = asyncio.run(UserWordsFirst()(spec(query="我在项目里负责什么"), pool))
    assert [c.hit.id.int for c in out].index(1) < [c.hit.id.int for c in out].index(2)


@pytest.mark.parametrize(
    ("question", "opener", "detail", "first"),
    [
        # the time the question asks for, which the opener lacks
        (
            "what time is my dentist appointment?",
            "need to set a reminder for the dentist",
            "thurs 7ish",
            2,
        ),
        # an amount
        (
            "how much did the brake job run me?",
            "took the civic in today, brakes were shot",
            "yeah $240 parts and labor. ouch",
            2,
        ),
        # a name
        ("我的仓鼠叫什么？", "我养了两只仓鼠", "一只叫豆豆，一只叫芝麻", 2),
        # the opener names the time already
        ("小林哪天过生日", "小林生日是6月18号，别忘了提醒我", "提前三天就行", 1),
        # a detail the question does not ask for
        (
            "what after-school activity did my daughter join?",
            "my daughter got into the robotics club at school",
            "she just turned 12",
            1,
        ),
        # a place in lowercase chat passes for none: no move for a place
        (
            "where does priya live?",
            "my friend priya is visiting from toronto this weekend",
            "prob brunch and the science museum",
            1,
        ),
        # ... but in Chinese a place is told apart: 在万达 names one, 给儿子报了个乐高编程课
        # none (and a place the question names is no answer: 杭州)
        ("乐高课在哪上", "给儿子报了个乐高编程课哈哈", "周六上午十点，在万达三楼", 2),
        (
            "我杭州出差订的哪个酒店",
            "下周要去杭州出差，帮我看看天气呗",
            "15号到18号，住西湖边上那个汉庭",
            2,
        ),
        # 走路 ("walk") only ends like a road
        ("上海出差住哪个酒店", "下周去上海出差，订了陆家嘴那边的亚朵，住三晚", "不用，走路就到", 1),
        # a grade: 四级 tells it, 学芭蕾三年了 does not; "intermediate" does, "12 people" not
        (
            "what ballet grade is my daughter testing for",
            "女儿学芭蕾三年了，下个月要考级",
            "四级",
            2,
        ),
        (
            "what level is my french class?",
            "my french class is intermediate, way harder than i thought",
            "there are 12 people in it and i'm the oldest lol",
            1,
        ),
        # a city is no answer to which hotel; a brand booked (订了亚朵) is one
        (
            "我出差住哪个酒店",
            "下周要去杭州出差，帮我看看天气呗",
            "15号到18号，住西湖边上那个汉庭",
            2,
        ),
        (
            "我出差订的哪个酒店？",
            "出差订了亚朵，明天入住",
            "会议在国际会展中心三楼，早上九点开始",
            1,
        ),
        # someone else's place is no answer to where the user stays
        ("我苏州订的哪家酒店？", "这周末去苏州玩，订了汉庭", "我同事上次去住的是平江路的全季", 1),
        # a statement whose last clause reads like a question does not ask either
        (
            "why can't i have regular milk?",
            "can't do milk in my coffee, i'm lactose intolerant",
            "yess oat milk gang",
            1,
        ),
        # a Chinese statement with 几 ("a few") does not ask
        ("假期准备去哪里旅游？", "国庆打算带爸妈去成都玩几天", "对，主要想吃火锅", 1),
        # an opener that asks but names the time asked for: it answers
        (
            "what day is our wedding anniversary",
            "our anniversary's coming up, 10 years on may 3rd!! ideas?",
            "lol tin. she'd kill me. the trip idea is nice tho",
            1,
        ),
        # a word of the question the opener lacks: the opener brought the topic up, the
        # turn tells what the question asks of it
        (
            "where does book club meet",
            "our book club is doing tomorrow and tomorrow and tomorrow this month",
            "yes pls. we meet at lena's place first sunday of the month",
            2,
        ),
        ("我的体检报告有啥问题", "上周去做了体检", "报告出来了，血脂有点高", 2),
        # ... not when the opener names what is asked and the turn does not
        ("我老公在哪里工作", "我老公在华为上班", "他每天加班到很晚，工作太累了", 1),
        # ... not a word for how often ("usually", 一般): it asks nothing of the topic
        ("我早上一般喝点啥？", "早上不来杯美式根本醒不过来", "嗯 一般配个面包", 1),
        (
            "what do i usually eat for lunch",
            "lunch is always a burrito bowl",
            "usually at my desk",
            1,
        ),
        # anything after an opener that only asks
        (
            "what kind of books do i like?",
            "what's a good book for a long flight?",
            "read it already, i'm more into sci fi tbh",
            2,
        ),
    ],
)
def test_the_details_go_above_the_turn_that_brought_them_up(
    question: str, opener: str, detail: str, first: int
) -> None:
    said = _exchange(1, opener, "s", 1, "user")
    asked = _exchange(3, "Sure, when?", "s", 2, "assistant")
    told = _exchange(2, detail, "s", 3, "user")
    pool = _ranked(said, asked, told, semantic=(0.9, 0.4, 0.6))
    out = asyncio.run(UserWordsFirst()(spec(query=question), pool))
    assert out[0].hit.id.int == first


@pytest.mark.parametrize(
    ("question", "opener", "asks", "detail", "first"),
    [
        # a clock time asked: a day in the opener is not one
        (
            "what time is that interview on thursday",
            "got an interview next week!!",
            "Congrats!! What's the company and role?",
            "product analyst at duolingo, thursday at 2pm eastern",
            2,
        ),
        # and an opener that names the clock time keeps its place
        (
            "what time is that interview on thursday",
            "interview thursday at 2pm!!",
            "Congrats!! What's the company and role?",
            "product analyst at duolingo, eastern time",
            1,
        ),
        # 最近 ("recently") names no day; 周几 and 啥时候 ask for one
        (
            "钢琴课是周几上的",
            "孩子最近报了个钢琴班",
            "不错呀！方便吗？",
            "每周六下午两点，老师姓陈",
            2,
        ),
        (
            "科目二补考啥时候",
            "科目二挂了一次 哭",
            "别灰心。约好了吗？",
            "约在12月8号，还是昌平考场",
            2,
        ),
        # who: a name (a title before it) the opener lacks
        (
            "whos my dentist",
            "can u remind me about my dentist appt",
            "Sure, when is it?",
            "tuesday the 12th at 8:15, dr okafor on main st",
            2,
        ),
        # how often: told by a frequency, not by the price after it
        (
            "how often do i go to the gym",
            "back at the gym! going mondays and thursdays before work",
            "Nice! How much is it?",
            "membership is 40 a month",
            1,
        ),
        (
            "how often am i supposed to take the antibiotic",
            "doctor put me on amoxicillin for the sinus thing",
            "What dose did she prescribe?",
            "500mg three times a day, 7 days",
            2,
        ),
    ],
)
def test_the_time_asked_is_told_as_the_question_asks_it(
    question: str, opener: str, asks: str, detail: str, first: int
) -> None:
    said = _exchange(1, opener, "s", 1, "user")
    asked = _exchange(3, asks, "s", 2, "assistant")
    told = _exchange(2, detail, "s", 3, "user")
    pool = _ranked(said, asked, told, semantic=(0.9, 0.4, 0.6))
    out = asyncio.run(UserWordsFirst()(spec(query=question), pool))
    assert out[0].hit.id.int == first


@pytest.mark.parametrize(
    ("question", "opener", "asks", "reply", "cosines", "first"),
    [
        # across languages, both ask for a thing by what it is: no word can be shared
        (
            "what robot vacuum did i buy",
            "上周买了个扫地机器人",
            "好用吗？哪款？",
            "石头的G10S，老卡在沙发底下",
            (0.50, 0.45, 0.20),
            2,
        ),
        # ... not when the assistant asked what it is about, or for a name
        (
            "我儿子的老师姓什么？",
            "got an email from max's teacher today",
            "Oh? What's the email about?",
            "just that max missed school because of the flu",
            (0.50, 0.45, 0.20),
            1,
        ),
        # ... nor in one language, where the words tell ("他喜欢哪个" is not 上什么课)
        (
            "儿子周六下午上什么课",
            "周六下午带儿子上游泳课",
            "挺好！他喜欢哪个？",
            "游泳，围棋坐不住哈哈",
            (0.50, 0.45, 0.20),
            1,
        ),
        # the assistant asked what the question asks, and the reply answers it
        (
            "what does mochi look like?",
            "we adopted a kitten!! her name is mochi",
            "Aww! What color is she?",
            "grey with white paws",
            (0.30, 0.45, 0.20),
            2,
        ),
        # ... asked alike too little: the opener stays first
        (
            "what does mochi look like?",
            "we adopted a kitten!! her name is mochi",
            "Aww! What color is she?",
            "grey with white paws",
            (0.45, 0.30, 0.20),
            1,
        ),
        # the opener names the amount asked for and the reply none: it stays first
        (
            "how much does marcus owe me",
            "lent marcus $400 for his transmission",
            "Want me to remind you around then?",
            "nah it's marcus, he's good for it",
            (0.30, 0.45, 0.20),
            1,
        ),
        # the assistant did not ask: nothing was answered
        (
            "what does mochi look like?",
            "we adopted a kitten!! her name is mochi",
            "Aww, congrats.",
            "grey with white paws",
            (0.30, 0.45, 0.20),
            1,
        ),
        # it asked for the same kind of answer (an amount), however far the cosines
        (
            "how much have we saved for the house so far",
            "we're trying to save for a down payment, goal is 60k by end of next year",
            "That's a clear target. How much do you have so far?",
            "about 22k sitting in the HYSA",
            (0.60, 0.10, 0.10),
            2,
        ),
        # ... but not when the opener gives one of that kind already (a place)
        (
            "十一假期我们去哪儿旅游？",
            "国庆打算带爸妈去云南玩",
            "云南很不错，准备去哪些地方？",
            "西双版纳和大理",
            (0.60, 0.10, 0.10),
            1,
        ),
        (
            "what time is my flight to denver",
            "flying to denver tomorrow at 6:40am",
            "What time are you leaving for the airport?",
            "probably 4:45",
            (0.60, 0.10, 0.10),
            1,
        ),
        # ... nor when it asks about someone else than the question
        (
            "how old is my daughter",
            "my daughter started kindergarten this fall",
            "How old is your son?",
            "he's 4",
            (0.60, 0.45, 0.30),
            1,
        ),
        (
            "我老公在哪上班",
            "我老公在腾讯上班，天天加班",
            "那你呢？在哪上班？",
            "我在一家小公司",
            (0.30, 0.45, 0.30),
            1,
        ),
        # a name only with a word in common: "Who recommended her?" asks another who
        (
            "who's my dentist",
            "my dentist is dr lee on 5th",
            "Who recommended her?",
            "jen from work",
            (0.60, 0.10, 0.10),
            1,
        ),
        # ... but a reply that has not decided answers nothing
        (
            "十一假期我们去哪儿旅游？",
            "国庆打算带爸妈去云南玩",
            "云南很不错，准备去哪些地方？",
            "还没想好",
            (0.60, 0.10, 0.10),
            1,
        ),
        # it asked about a word of the question the opener lacks
        (
            "what size shoe does dad wear",
            "looking at those allbirds tree runners for my dad's birthday",
            "Nice pick. Do you know his size and which color he'd like?",
            "11, the charcoal grey",
            (0.60, 0.10, 0.10),
            2,
        ),
        # ... in a sentence before its question: no
        (
            "what size should i get in hoka",
            "need new running shoes, these are worn out",
            "Sizing varies a lot between brands. Are you looking for road or trail?",
            "road",
            (0.60, 0.10, 0.10),
            1,
        ),
        # an offer is taken up, it asks for nothing the question asks
        (
            "what day is the power bill due",
            "electric bill is due the 18th every month",
            "Annoying. Want me to remind you a few days before?",
            "yes the 15th",
            (0.30, 0.45, 0.20),
            1,
        ),
    ],
)
def test_the_reply_to_what_the_assistant_asked_goes_above_the_opener(
    question: str,
    opener: str,
    asks: str,
    reply: str,
    cosines: tuple[float, float, float],
    first: int,
) -> None:
    """The question's cosines with the assistant's question and the user's reply, summed,
    pass its cosine with the opener by `asked_alike` (0.17): the reply answers what the
    question asks, the opener only brought the topic up."""
    said = _exchange(1, opener, "s", 1, "user")
    asked = _exchange(3, asks, "s", 2, "assistant")
    told = _exchange(2, reply, "s", 3, "user")
    q_opener, q_asked, q_reply = cosines
    pool = [
        Candidate(said, 0.9, 1.0, 0.5, 1.0, cosine=q_opener),
        Candidate(asked, 0.6, 1.0, 0.5, 0.99, cosine=q_asked),
        Candidate(told, 0.3, 1.0, 0.5, 0.98, cosine=q_reply),
    ]
    out = asyncio.run(UserWordsFirst()(spec(query=question), pool))
    assert out[0].hit.id.int == first


def test_the_answer_two_exchanges_on_goes_above_the_opener() -> None:
    """ "every other saturday, 45 min" answers "How often do you see him?", two exchanges
    after "started guitar lessons finally!!": for "how often do i have guitar lessons" it
    goes above the opener; an answer to a question the assistant did not ask stays."""
    said = _exchange(1, "started guitar lessons finally!! teacher's name is carlos", "s", 0, "user")
    chords = _exchange(3, "basic open chords, G C D and E minor", "s", 2, "user")
    asked = _exchange(4, "The classic starter set. How often do you see him?", "s", 3, "assistant")
    often = _exchange(2, "every other saturday, 45 min", "s", 4, "user")

    def ranked(ask: VectorHit) -> list[Candidate]:
        return [
            Candidate(said, 0.9, 1.0, 0.5, 1.0, cosine=0.6),
            Candidate(ask, 0.5, 1.0, 0.5, 0.99, cosine=0.2),
            Candidate(often, 0.4, 1.0, 0.5, 0.98, cosine=0.1),
            Candidate(chords, 0.3, 1.0, 0.5, 0.97, cosine=0.1),
        ]

    stage = UserWordsFirst()
    out = asyncio.run(stage(spec(query="how often do i have guitar lessons"), ranked(asked)))
    assert out[0].hit.id.int == 2
    told = _exchange(4, "The classic starter set.", "s", 3, "assistant")
    out = asyncio.run(stage(spec(query="how often do i have guitar lessons"), ranked(told)))
    assert out[0].hit.id.int == 1


def test_details_that_share_few_words_move_and_keep_half_the_openers_relevance() -> None:
    """ "200 bucks, ugh" (0.19) is the amount 房租要涨多少？ asks for, after "my landlord's
    raising the rent in may" (0.9): it moves, and the floor after the stage keeps it. After
    an opener that only asks, a reply that relevant on its own is a new topic instead."""
    said = _exchange(1, "my landlord's raising the rent in may", "s", 1, "user")
    asked = _exchange(3, "By how much?", "s", 2, "assistant")
    told = _exchange(2, "200 bucks, ugh", "s", 3, "user")
    pool = _ranked(said, asked, told, semantic=(0.9, 0.3, 0.19))
    out = asyncio.run(UserWordsFirst()(spec(query="房租要涨多少？"), pool))
    assert [c.hit.id.int for c in out] == [2, 1, 3]
    assert out[0].semantic == pytest.approx(0.45)
    asks = _exchange(1, "我妈血糖有点高，有什么适合她吃的早餐吗？", "s", 1, "user")
    aside = _exchange(2, "燕麦她不爱吃，我试试别的", "s", 3, "user")
    pool = _ranked(asks, asked, aside, semantic=(0.29, 0.3, 0.14))
    out = asyncio.run(UserWordsFirst()(spec(query="我妈妈身体有什么问题？"), pool))
    assert out[0].hit.id.int == 1
    assert out[-1].semantic == pytest.approx(0.14)


def test_turns_of_one_request_are_ordered_by_their_place_in_the_session() -> None:
    """Messages sent without `created_at` share the time their request came in: "actually
    i got a new one, 555-0142" is still the newer one, by its seq."""

    def said(n: int, text: str, seq: int, turn: list[float]) -> VectorHit:
        return hit(
            n,
            days_old=0.5,
            turn=turn,
            content=f"user: {text}",
            role="user",
            session_id="s",
            sources=[{"session_id": "s", "message_id": f"m{seq}", "seq": seq}],
        )

    old = said(1, "my phone number is 555-0198", 4, _OLD_TURN)
    new = said(2, "actually i got a new one, 555-0142", 6, _NEW_TURN)
    out = asyncio.run(
        NewerFactsFirst(0.4)(spec(query="what's my phone number?"), _ranked(old, new))
    )
    assert [c.hit.id.int for c in out] == [2, 1]


def test_a_change_that_names_its_value_brings_no_next_turn_along() -> None:
    """ "switched to a new number, 555-0142" tells its value: the user's next turn ("我女儿
    在学钢琴，每周六上午") is about something else and stays where it ranked."""
    old = _thread_turn(1, "my phone number is 555-0198", 1, _OLD_TURN, session="a")
    change = _thread_turn(2, "switched to a new number, 555-0142", 3, _NEW_TURN, session="b")
    other = _thread_turn(3, "老师好像不太靠谱", 9, _OLD_TURN, session="c")
    aside = _thread_turn(4, "我女儿在学钢琴，每周六上午", 4, [0.0, 0.0, 1.0], session="b")
    pool = _ranked(old, other, aside, change, semantic=(0.99, 0.3, 0.24, 0.73))
    stage = NewerFactsFirst(0.4, restate_similarity=None)
    out = asyncio.run(stage(spec(query="what's my phone number?"), pool))
    assert [c.hit.id.int for c in out] == [2, 1, 3, 4]


@pytest.mark.parametrize(
    ("query", "text", "semantic"),
    [
        # "right now" is no statement of how things stand
        ("when is my dentist appointment?", "yes please, right now im swamped at work", 0.5),
        # a correction opener with nothing relevant or numbered after it
        ("where do i work?", "oops sorry wrong chat lol", 0.02),
        # says it adds ("also"): both are true
        ("what pet do i have?", "and we also got a kitten now", 0.8),
        # a question
        ("when is my flight?", "so what time should i leave now?", 0.8),
        # a change in words, but the question is about the past: the older one answers
        ("what was my old address?", "oh wait we just moved last week, its 88 harbor rd", 0.8),
        # a statement of now that names no time for a question about one
        ("老师让孩子每天练琴多久", "好主意！他现在在弹小汤四", 0.8),
        # ... nor a number for a question about one
        ("how much do i pay for rent now?", "right, im at home now", 0.8),
    ],
)
def test_a_turn_a_few_on_that_is_no_new_value_replaces_nothing(
    query: str, text: str, semantic: float
) -> None:
    old = _thread_turn(1, "my address is 14 elm st apt 2", 1, _OLD_TURN)
    new = _thread_turn(2, text, 3, _FAR_TURN)
    out = asyncio.run(
        NewerFactsFirst(0.4)(spec(query=query), _ranked(old, new, semantic=(0.9, semantic)))
    )
    assert [c.hit.id.int for c in out] == [1, 2]
    assert out[1].semantic == pytest.approx(semantic)


@pytest.mark.parametrize(
    ("question", "detail"),
    [
        ("how much is my rent going up?", "also my car insurance went up to 120 a month"),
        ("what time is my dentist appointment?", "last time they found 2 cavities lol"),
        ("how much did the brake job cost?", "the one on main st"),
        ("我房租多少钱？", "千万别让我搬家"),
        ("what's my puppy's name?", "a corgi, already called the vet"),
    ],
)
def test_a_next_turn_that_tells_no_detail_asked_for_stays_below(question: str, detail: str) -> None:
    said = _exchange(1, "my landlord said something about the rent and the dentist", "s", 1, "user")
    asked = _exchange(3, "Oh?", "s", 2, "assistant")
    told = _exchange(2, detail, "s", 3, "user")
    pool = _ranked(said, asked, told, semantic=(0.9, 0.3, 0.5))
    out = asyncio.run(UserWordsFirst()(spec(query=question), pool))
    assert out[0].hit.id.int == 1


def test_a_yes_that_names_a_number_answers_the_question() -> None:
    """ "yeah around 2k max" answers "Do you have a budget in mind?" with a value of its
    own; "对，主要想吃火锅" only agrees."""
    opener = _exchange(3, "looking at new laptops", "s", 1, "user")
    asked = _exchange(1, "Do you have a budget in mind?", "s", 2, "assistant")
    for reply, moves in (("yeah around 2k max", True), ("yeah definitely", False)):
        answer = _exchange(2, reply, "s", 3, "user")
        pool = _ranked(asked, opener, answer, semantic=(0.8, 0.3, 0.7))
        out = asyncio.run(UserWordsFirst()(spec(query="how much can i spend on a laptop?"), pool))
        ids = [c.hit.id.int for c in out]
        assert (ids.index(2) < ids.index(1)) is moves


def test_a_change_in_a_thread_replaces_at_the_low_floor_only_the_statement_closest_to_it() -> None:
    """ "老师那边调了时间，以后都是周日下午" (a change) is 0.31 from "actually i got a new one,
    555-0142" two turns before it, and 0.92 from "我女儿在学钢琴，每周六上午": it is no
    new phone number."""
    fix = _thread_turn(1, "actually i got a new one, 555-0142", 6, [0.6, 0.8, 0.0])
    piano = _thread_turn(2, "我女儿在学钢琴，每周六上午", 7, [0.0, 0.0, 1.0])
    change = _thread_turn(3, "老师那边调了时间，以后都是周日下午", 9, [0.0, 0.385, 0.923])
    stage = NewerFactsFirst(0.4, restate_similarity=0.99)
    pool = _ranked(fix, piano, change, semantic=(0.73, 0.2, 0.36))
    out = asyncio.run(stage(spec(query="what's my phone number?"), pool))
    assert [c.hit.id.int for c in out] == [1, 3, 2]


def test_a_change_in_a_thread_may_replace_a_statement_nearly_as_close_as_the_closest() -> None:
    """ "复查完医生说加到一片" is 0.43 from "嗯早上空腹" between them and 0.36 from "我每天
    吃半片优甲乐", which it replaces (within `closest_margin`)."""
    dose = _thread_turn(1, "我每天吃半片优甲乐", 1, [1.0, 0.0, 0.0])
    aside = _thread_turn(2, "嗯早上空腹", 3, [0.0, 1.0, 0.0])
    new = _thread_turn(3, "复查完医生说加到一片", 5, [0.36, 0.43, 0.828])
    stage = NewerFactsFirst(0.4, restate_similarity=0.99)
    pool = _ranked(dose, aside, new, semantic=(0.97, 0.7, 0.08))
    out = asyncio.run(stage(spec(query="优甲乐现在一次吃多少"), pool))
    assert [c.hit.id.int for c in out] == [3, 1, 2]


def test_a_moved_answer_passes_the_floor_its_old_value_passes() -> None:
    """ "saw dr patel, switching to 100mg from monday" (0.02) replaces "started the sertraline
    today, 50mg in the morning" (0.198) for "what dose of zoloft am i on": half of 0.198 is
    under the 0.1 floor, which would keep the old dose and drop the new one."""
    old = _thread_turn(1, "started the sertraline today, 50mg in the morning", 1, _OLD_TURN)
    new = _thread_turn(2, "saw dr patel, switching to 100mg from monday", 5, _NEW_TURN)
    pool = _ranked(old, new, semantic=(0.198, 0.02))
    query = "what dose of zoloft am i on"
    moved = asyncio.run(NewerFactsFirst(0.4)(spec(query=query, min_relevance=0.1), pool))
    assert [c.hit.id.int for c in moved] == [2, 1]
    assert moved[0].semantic == pytest.approx(0.1)
    kept = asyncio.run(MinRelevance()(spec(query=query, min_relevance=0.1), moved))
    assert [c.hit.id.int for c in kept] == [2, 1]
    # An old value under the floor itself lends only its half: both go.
    pool = _ranked(old, new, semantic=(0.08, 0.02))
    moved = asyncio.run(NewerFactsFirst(0.4)(spec(query=query, min_relevance=0.1), pool))
    assert moved[0].semantic == pytest.approx(0.04)


def test_the_assistant_confirming_a_change_stays_below_the_users_words() -> None:
    """ "好的，改成周四晚上了。几点到？" states a change, right after the user's "哦不对，不是
    周三，是周四，她改票了" it confirms: for 我妈哪天到 the user's words stay first."""
    old = _thread_turn(1, "提醒我周三晚上去接我妈，她从老家过来", 0, _OLD_TURN)
    fix = _thread_turn(2, "哦不对，不是周三，是周四，她改票了", 2, _NEW_TURN)
    ok = _thread_turn(3, "好的，改成周四晚上了。几点到？", 3, _NEW_TURN, role="assistant")
    out = asyncio.run(NewerFactsFirst(0.4)(spec(query="我妈哪天到"), _ranked(old, fix, ok)))
    ids = [c.hit.id.int for c in out]
    assert ids.index(2) < ids.index(3)
    assert ids.index(2) < ids.index(1)
    # News the assistant brings after a plain statement replaces it.
    said = _thread_turn(1, "my flight to boston is at 6pm", 0, _OLD_TURN)
    news = _thread_turn(
        3, "Heads up: the flight was rescheduled to 8:15pm.", 1, _NEW_TURN, role="assistant"
    )
    out = asyncio.run(
        NewerFactsFirst(0.4)(spec(query="when is my flight to boston?"), _ranked(said, news))
    )
    assert [c.hit.id.int for c in out] == [3, 1]


@pytest.mark.parametrize(
    ("query", "said", "kept"),
    [
        # The topic is the question's, the time or the number was never said.
        ("when is my husband's birthday?", ["gift ideas for my husband? he likes golf"], False),
        ("我家猫几岁了", ["我家猫最近掉毛厉害", "可能是换季了"], False),
        ("when's my car registration due", ["2016 rav4, 98k miles"], False),
        # Said, in words the stricter tests miss, or in a result below the first.
        ("when is my husband's birthday?", ["gift ideas for him?", "his bday is aug 2"], True),
        ("我通关那个游戏用了多长时间", ["finally finished elden ring, took me 140 hours"], True),
        ("火锅那天一共几个人", ["算上我们俩一共八个"], True),
        ("褪黑素啥时候吃", ["医生让我睡前吃一片褪黑素"], True),
        ("我公司的停车位是几号？", ["finally got a reserved parking spot at work, B14"], True),
        ("when did i start running?", ["started running 3 months ago"], True),
        # A size, told in numbers or in words; not asked for: an age (多大了).
        ("what's my wife's ring size", ["need a podcast for my commute"], False),
        ("what size shoe does dad wear", ["looking at allbirds for dad"], False),
        ("what size shoe does dad wear", ["looking at allbirds for dad", "he's a 10.5"], True),
        ("我要买的床垫多大", ["medium firm, queen"], True),
        ("我要买的床垫多大", ["床垫太硬了想换"], False),
        ("豆豆多大了？", ["豆豆是只小柯基，很乖"], False),
        # Not asked for a time or a number: left to the floor.
        ("那几件衣服是在哪买的？", ["那件外套是在优衣库买的"], True),
        ("who's my dentist?", ["i need to book a dentist appt"], True),
        ("what's my cat's name", ["my cat is being picky with her food"], True),
    ],
)
async def test_a_question_for_a_time_or_a_number_that_no_result_tells_gets_none(
    query: str, said: list[str], kept: bool
) -> None:
    """`_never_told`: no floor on relevance tells a near-topic question about something
    never said from an answer (0.93 for the husband's birthday over the gift ideas)."""
    hits = [_statement(n, text, 0, [1.0, 0.0, 0.0]) for n, text in enumerate(said, 1)]
    out = _ranked(*hits, semantic=[0.9] * len(hits))
    got = await MinRelevance()(spec(query=query, min_relevance=0.1), out)
    assert bool(got) is kept
    # Without a floor (min_relevance 0, the context's recall) every result is kept.
    assert len(await MinRelevance()(spec(query=query, min_relevance=0.0), out)) == len(hits)


@pytest.mark.parametrize(
    ("query", "text", "role", "semantic", "kept"),
    [
        # Barely related, and it states nothing of the user's: the assistant's turn, the
        # user's asking it for something.
        ("我老公在哪上班？", "小米粥怎么煮才黏糊", "user", 0.106, False),
        (
            "where did i go to college?",
            "A Roth IRA is a retirement account.",
            "assistant",
            0.12,
            False,
        ),
        # The user's own statement that low is an answer in other words.
        ("Where do I live?", "I moved to Lisbon last May.", "user", 0.13, True),
        # A question that tells something first is a statement too.
        (
            "what meds am i on?",
            "i'm on lisinopril for blood pressure, is it ok to take ibuprofen?",
            "user",
            0.15,
            True,
        ),
        # Above twice the floor, or a question about what the assistant said: kept.
        (
            "where did i go to college?",
            "A Roth IRA is a retirement account.",
            "assistant",
            0.21,
            True,
        ),
        ("what did you recommend for dinner?", "Try the Trattoria Lucia.", "assistant", 0.12, True),
        # ... but not under the floor itself
        (
            "what did you recommend for dinner?",
            "Try the Trattoria Lucia.",
            "assistant",
            0.05,
            False,
        ),
        # A query of keywords asks nothing of the user's.
        ("cooking conversions", "About 4.2 US cups.", "assistant", 0.138, True),
        ("my shoe size", "A Roth IRA is a retirement account.", "assistant", 0.12, False),
        # An import's named second speaker in the assistant's role states too.
        ("What did Melanie paint?", "I painted a lake at sunrise.", "Melanie", 0.12, True),
    ],
)
async def test_a_turn_that_states_nothing_needs_twice_the_floor(
    query: str, text: str, role: str, semantic: float, kept: bool
) -> None:
    """Unrelated turns of a short history score 0.10-0.20: the assistant's replies and the
    user's requests to it were what a question about something never mentioned got back;
    the answers that low are the user's own statements in other words."""
    said = hit(1, content=f"{role}: {text}", role="user" if role == "user" else "assistant")
    out = await MinRelevance()(
        spec(query=query, min_relevance=0.1), _ranked(said, semantic=[semantic])
    )
    assert bool(out) is kept
    assert await MinRelevance()(
        spec(query=query, min_relevance=0.0), _ranked(said, semantic=[semantic])
    )


async def test_a_stored_question_restates_nothing() -> None:
    """The user's "what's my blood type?", stored after "my blood type is O negative", is
    no newer value of it: the statement stays first for the same question asked later."""
    v = [1.0, 0.0, 0.0]
    said = hit(1, days_old=30, turn=v, content="user: my blood type is O negative", role="user")
    asked = hit(2, days_old=1, turn=v, content="user: what's my blood type?", role="user")
    out = await NewerFactsFirst(0.4)(
        spec(query="what's my blood type?"), _ranked(said, asked, semantic=(0.86, 0.68))
    )
    assert [c.hit.id.int for c in out] == [1, 2]


@pytest.mark.parametrize(
    ("query", "request_text", "first"),
    [
        # what the assistant said: its reply, not the request that holds the topic's words
        ("what book did you recommend", "can you recommend a good sci-fi book", 2),
        ("你上次推荐的那本书叫啥", "推荐一本好看的科幻小说呗", 2),
        # what the user asked, or a request that tells the user's fact first
        ("what did i ask you to recommend", "can you recommend a good sci-fi book", 1),
        ("what did you recommend", "i loved dune, can you recommend a similar sci-fi book", 1),
    ],
)
async def test_the_assistants_reply_goes_above_the_request_it_answers(
    query: str, request_text: str, first: int
) -> None:
    asked = _exchange(1, request_text, "s", 1, "user")
    reply = _exchange(2, "Try 'The Left Hand of Darkness' by Ursula Le Guin.", "s", 2, "assistant")
    out = await UserWordsFirst()(spec(query=query), _ranked(asked, reply, semantic=(1.0, 0.98)))
    assert out[0].hit.id.int == first


def test_a_question_for_a_number_ranks_a_memory_that_names_none_lower() -> None:
    """ "How old is my dog?": the turn with the age goes above an as close one with no
    number (the answer-type penalty, as for a time or a place), also when it is first in
    both lists; the relevance is left alone."""
    pool = ranked(
        [
            hit(1, content="user: 我下个月要去柏林出差。"),
            hit(2, content="user: Pixel turns 3 in June."),
        ]
    )
    out = score(spec(query="How old is my dog?"), pool)
    assert [c.hit.id.int for c in out] == [2, 1]
    asked_nothing = score(spec(query="Tell me about my dog"), pool)
    assert [c.hit.id.int for c in asked_nothing] == [1, 2]


@pytest.mark.parametrize(
    ("query", "thread", "kept"),
    [
        # Every turn speaks of someone else, by name or through its thread.
        (
            "when is my son's recital?",
            ["my daughter's piano recital is may 18", "Is she nervous?", "terrified lol"],
            False,
        ),
        (
            "我爸吃的是什么药",
            ["我妈血压有点高，医生让她吃氨氯地平", "好的 我给她买了个血压计"],
            False,
        ),
        (
            "what's my cat called",
            ["my dog luna keeps chewing the couch", "tons, she ignores them"],
            False,
        ),
        # They are named, also by the assistant, or may be by a pronoun.
        (
            "when is my son's game?",
            ["my daughter plays too", "Does your son play?", "yeah saturday"],
            True,
        ),
        ("when is my son's game?", ["my wife is taking him saturday"], True),
        # The user's own news, a thread that is not in the pool, someone without a class.
        ("who's my husband's dentist", ["i need to book a dentist appt"], True),
        ("when is my son's game?", ["leo's game is saturday at 10"], True),
        # Someone no class holds, or someone new ("too"), may be the one asked about.
        (
            "does my son have a fever?",
            [
                "my daughter has been sick all week",
                "Hope she feels better.",
                "and now the little guy has a fever too",
            ],
            True,
        ),
        (
            "is my son sick?",
            ["my daughter's been sick all week", "Poor thing!", "and now leo has it too ugh"],
            True,
        ),
        (
            "when is my son's recital?",
            ["the kids are both in the recital on may 18, my daughter on violin"],
            True,
        ),
        (
            "我女儿什么时候打疫苗",
            ["我老公出差了", "那这周你一个人带娃？", "对啊 朵朵周三还要打疫苗"],
            True,
        ),
        ("我老公今天几点下班", ["孩子他爸今天又加班到十点"], True),
        # Someone described, or through another's relation, may be the one asked about.
        (
            "when is my neighbor moving out?",
            ["my mom's knee is acting up", "the guy upstairs is moving out on the 30th"],
            True,
        ),
        (
            "how long is my aunt staying?",
            ["my mom's sister is coming for christmas", "Nice! How long?", "a week"],
            True,
        ),
        (
            "how old is my son?",
            [
                "my daughter is mad, her little brother keeps taking her ipad",
                "How old is he?",
                "6, she's 10",
            ],
            True,
        ),
        ("我儿子在学校怎么了", ["女儿说她弟弟在学校跟人打架了"], True),
        # A class word that names no one.
        ("what was that dad joke i liked?", ["my coworker told the best pun today"], True),
        # Advice may use what was said of someone else.
        ("what should i get my dad for his birthday?", ["mom loved the cashmere scarf"], True),
    ],
)
async def test_a_question_about_someone_no_memory_speaks_of_gets_none(
    query: str, thread: list[str], kept: bool
) -> None:
    """`_told_of_others`: "when is my son's recital?" over the daughter's recital (0.93)
    was never answered; a memory that names no one speaks of whom its thread does."""
    roles = ["user", "assistant"]
    hits = [
        _thread_turn(n, text, n, [1.0, 0.0, 0.0], role=roles[(n - 1) % 2])
        for n, text in enumerate(thread, 1)
    ]
    out = _ranked(*hits, semantic=[0.9] * len(hits))
    got = await MinRelevance()(spec(query=query, min_relevance=0.1), out)
    assert bool(got) is kept
    assert len(await MinRelevance()(spec(query=query, min_relevance=0.0), out)) == len(hits)


async def test_a_thread_not_in_the_pool_keeps_its_turn() -> None:
    """A turn that names no one, whose turn before is not among the candidates, may speak
    of the one asked about: the results stay."""
    said = _thread_turn(1, "my daughter's recital is may 18", 1, [1.0, 0.0, 0.0])
    later = _thread_turn(2, "his is the week after", 3, [1.0, 0.0, 0.0])
    out = _ranked(said, later, semantic=[0.9, 0.9])
    got = await MinRelevance()(spec(query="when is my son's recital?", min_relevance=0.1), out)
    assert len(got) == 2
