"""Reconciliation plans, merge-patch and entity names, without I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.core import facts
from app.core.graph import clean_predicate, name_key
from app.core.profile import merge_patch

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def msg(seq: int, content: str, role: str = "user") -> facts.BatchMessage:
    return facts.BatchMessage(
        seq,
        role,
        content,
        T0 + timedelta(minutes=seq),
        {"session_id": "s", "message_id": f"seq:{seq}", "seq": seq},
    )


LISBON = facts.KnownFact(uuid.uuid4(), "The user lives in Lisbon.", "semantic", T0)
CAT = facts.KnownFact(uuid.uuid4(), "The user has a cat.", "semantic", T0)


def extraction(*items: dict[str, Any], triples: list[dict[str, Any]] | None = None) -> Any:
    return facts.Extraction.model_validate({"facts": list(items), "triples": triples or []})


def test_update_supersedes_its_target_at_the_messages_time() -> None:
    batch = [msg(1, "I moved to Porto."), msg(2, "Nice!", "assistant")]
    plan = facts.plan(
        extraction(
            {
                "action": "update",
                "target": "F1",
                "content": "The user lives in Porto.",
                "sources": [1],
                "reason": "moved",
            }
        ),
        batch,
        [LISBON, CAT],
    )
    [d] = plan.decisions
    assert (d.action, d.target, d.reason) == ("update", LISBON.id, "moved")
    assert d.at == batch[0].created_at
    assert d.sources == [batch[0].source]


def test_nothing_is_invented() -> None:
    batch = [msg(1, "hello")]
    plan = facts.plan(
        extraction(
            {"content": "The user owns a yacht.", "sources": [7]},  # not in the batch
            {"content": "The user likes tea."},  # no source at all
            {"action": "delete", "target": "F9", "sources": [1]},  # no such fact
            {"action": "update", "content": "x", "sources": [1]},  # no target
        ),
        batch,
        [LISBON],
    )
    assert plan.decisions == []
    assert len(plan.dropped) == 4


def test_repeats_become_confirmations_and_each_target_is_decided_once() -> None:
    batch = [msg(1, "I live in Lisbon and I have a cat.")]
    plan = facts.plan(
        extraction(
            {"content": "The user lives in Lisbon.", "sources": [1]},  # word for word
            {
                "action": "update",
                "target": "F2",
                "content": "The user has a cat.",
                "sources": [1],
            },  # an "update" to the same words
            {"action": "delete", "target": "F1", "sources": [1]},  # F1 already decided
            {"content": "New fact.", "sources": [1]},
            {"content": "New  fact.", "sources": [1]},  # the same, spaced differently
        ),
        batch,
        [LISBON, CAT],
    )
    assert [(d.action, d.target) for d in plan.decisions] == [
        ("none", LISBON.id),
        ("none", CAT.id),
        ("add", None),
    ]


def test_triples_keep_their_sources_or_borrow_their_facts() -> None:
    batch = [msg(1, "My sister Anna lives in Berlin.")]
    plan = facts.plan(
        extraction(
            {"content": "The user's sister is Anna.", "sources": [1]},
            triples=[
                {"subject": "user", "predicate": "sister", "object": "Anna", "fact": 0},
                {"subject": "Anna", "predicate": "lives_in", "object": "Berlin", "sources": [1]},
                {"subject": "Anna", "predicate": "owns", "object": "yacht"},  # unsupported
            ],
        ),
        batch,
        [],
    )
    assert [(t.subject, t.object, t.fact) for t in plan.triples] == [
        ("user", "Anna", 0),
        ("Anna", "Berlin", None),
    ]
    assert all(t.sources == [batch[0].source] for t in plan.triples)


def test_fact_ids_are_stable_per_batch_and_text() -> None:
    a = facts.fact_id("s\x1fi\x1f0-4", "The user lives in Porto.")
    assert a == facts.fact_id("s\x1fi\x1f0-4", "The user lives in Porto.")
    assert a != facts.fact_id("s\x1fi\x1f4-8", "The user lives in Porto.")


def test_an_old_fact_never_ends_before_it_began() -> None:
    assert facts.ended_at(T0, T0 - timedelta(days=1)) == T0
    assert facts.ended_at(T0, T0 + timedelta(days=1)) == T0 + timedelta(days=1)
    assert facts.ended_at(None, T0) == T0


def test_the_prompt_labels_known_facts_and_carries_the_batch() -> None:
    [system, user] = facts.prompt([msg(3, "我住在上海。")], [LISBON])
    assert system["role"] == "system"
    assert '"label":"F1"' in user["content"]
    assert "我住在上海。" in user["content"]
    assert '"seq":3' in user["content"]


def test_merge_patch_rfc7396_examples() -> None:
    # RFC 7396 appendix A, a selection.
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


def test_entity_names_and_predicates() -> None:
    assert name_key("  Anna ") == name_key("ANNA") == name_key("ａｎｎａ") == "anna"
    assert name_key("New  York") == "new york"
    assert clean_predicate("Lives in") == clean_predicate("lives_in") == "lives_in"
