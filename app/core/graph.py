"""Knowledge-graph rules without I/O: how entity names are compared."""

from __future__ import annotations

import unicodedata


def name_key(name: str) -> str:
    """The form two names are the same entity in: NFKC, case-folded, single spaces
    ("Anna", "anna", "ＡＮＮＡ" are one entity)."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def clean_name(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).split())


def clean_predicate(predicate: str) -> str:
    """Predicates as lower snake case: "Lives in" and "lives_in" are one relation type."""
    return "_".join(unicodedata.normalize("NFKC", predicate).casefold().split())
