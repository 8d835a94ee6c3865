"""Knowledge-graph rules without I/O: how entity names are compared."""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any


def name_key(name: str) -> str:
    """The form two names are the same entity in: NFKC, case-folded, single spaces
    ("Anna", "anna", "ＡＮＮＡ" are one entity)."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def clean_name(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).split())


def clean_predicate(predicate: str) -> str:
    """Predicates as lower snake case: "Lives in" and "lives_in" are one relation type."""
    return "_".join(unicodedata.normalize("NFKC", predicate).casefold().split())


def detach_session(
    sources_by_relation: dict[uuid.UUID, list[dict[str, Any]]], session_id: str
) -> tuple[list[uuid.UUID], dict[uuid.UUID, list[dict[str, Any]]]]:
    """A deleted session's share of the graph: relations sourced only from it go (their
    words came from it); relations also sourced elsewhere keep their other sources.
    Returns (ids to delete, new sources by id)."""
    doomed: list[uuid.UUID] = []
    shrink: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for rid, sources in sources_by_relation.items():
        kept = [s for s in sources if s.get("session_id") != session_id]
        if not kept:
            doomed.append(rid)
        elif len(kept) != len(sources):
            shrink[rid] = kept
    return doomed, shrink
