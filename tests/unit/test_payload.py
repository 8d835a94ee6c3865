"""The point payload schema (`app.stores.vectors`): one encoding, written and read back."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from app.stores.vectors import MemoryPayload, PayloadPatch, encode_patch, filterable

CREATED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SEEN = datetime(2025, 3, 2, 8, 30, tzinfo=UTC)


TEA = MemoryPayload(
    tenant_id="t",
    user_id="u",
    session_id="s",
    memory_type="episodic",
    content="user: I like tea",
    importance=0.7,
    sources=[{"session_id": "s", "message_id": "m1", "seq": 1}],
    metadata={"topic": "drinks", "n": 3, "flag": True, "nested": {"x": 1}},
    created_at=CREATED,
    pinned=True,
    access_count=4,
    last_accessed_at=SEEN,
    role="user",
)


def test_the_stored_form_is_what_the_index_filters_on() -> None:
    stored = TEA.to_dict()
    assert stored == {
        "tenant_id": "t",
        "user_id": "u",
        "session_id": "s",
        "kind": "memory",
        "memory_type": "episodic",
        "content": "user: I like tea",
        "role": "user",
        "importance": 0.7,
        "pinned": 1,
        "access_count": 4,
        "created_at": CREATED.timestamp(),
        "last_accessed_at": SEEN.timestamp(),
        "valid_to": None,  # a fact's end (docs/facts.md); None while it holds
        "sources": [{"session_id": "s", "message_id": "m1", "seq": 1}],
        "metadata": {"topic": "drinks", "n": 3, "flag": True, "nested": {"x": 1}},
        "meta_filter": {"topic": "drinks", "n": 3, "bool:flag": 1},
        "source_sessions": ["s"],
    }
    assert MemoryPayload.from_dict(stored).text == "I like tea"


def test_source_sessions_follow_every_change_of_the_sources() -> None:
    two = [
        {"session_id": "b", "message_id": "m1", "seq": 1},
        {"session_id": "a", "message_id": "m2", "seq": 2},
        {"session_id": "b", "message_id": "m3", "seq": 3},
    ]
    assert encode_patch(PayloadPatch(sources=two))["source_sessions"] == ["a", "b"]
    assert encode_patch(PayloadPatch(sources=[]))["source_sessions"] == []
    assert "source_sessions" not in encode_patch(PayloadPatch(session_id=None))


def test_no_session_is_stored_as_an_empty_keyword_and_read_back_as_none() -> None:
    stored = replace(TEA, session_id=None, last_accessed_at=None, pinned=False).to_dict()
    assert stored["session_id"] == ""
    assert stored["last_accessed_at"] is None
    assert stored["pinned"] == 0
    back = MemoryPayload.from_dict(stored)
    assert back.session_id is None
    assert back.last_accessed_at is None
    assert back.pinned is False


def test_a_payload_reads_back_as_written() -> None:
    original = TEA
    assert MemoryPayload.from_dict(original.to_dict()) == original


def test_a_patch_is_encoded_as_the_full_payload_encodes_those_fields() -> None:
    full = TEA.to_dict()
    patch: PayloadPatch = {"session_id": None, "created_at": CREATED, "metadata": {"on": False}}
    assert encode_patch(patch) == {
        "session_id": "",
        "created_at": full["created_at"],
        "metadata": {"on": False},
        "meta_filter": {"bool:on": 0},
    }
    assert encode_patch(TEA.as_patch()) == {
        k: v
        for k, v in full.items()
        if k not in {"tenant_id", "user_id", "kind", "content", "role"}
    }


def test_booleans_filter_in_their_own_key_space() -> None:
    assert filterable({"a": True, "b": 1, "c": "x", "d": 1.5, "e": None, "f": [1]}) == {
        "bool:a": 1,
        "b": 1,
        "c": "x",
    }


def test_only_older_schemas_of_the_same_model_and_size_are_superseded() -> None:
    from app.stores.vectors import SCHEMA_VERSION, collection_name, superseded_collections

    model = "bge-v1.5"  # its safe name holds "_v1_" too
    today = collection_name("strata", model, 384)
    older = [f"strata_v{v}_bge_v1_5_384" for v in range(1, SCHEMA_VERSION)]
    others = [
        today,
        f"strata_v{SCHEMA_VERSION + 1}_bge_v1_5_384",  # newer: a later version's, kept
        "strata_v1_bge_v1_5_768",  # another size
        "strata_v1_use_m3_384",  # another model
        "mine_v1_bge_v1_5_384",  # another prefix
        "strata_vx_bge_v1_5_384",
    ]
    assert older
    assert superseded_collections([*others, *older], "strata", model, 384) == sorted(older)
