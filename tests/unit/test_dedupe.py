"""Near-duplicate detection (`app.core.dedupe`): pure, no I/O."""

from __future__ import annotations

from app.core.dedupe import content_hash


def test_the_content_hash_ignores_case_punctuation_and_spacing() -> None:
    assert content_hash("user: I like  tea!") == content_hash("USER I like tea")
    assert content_hash("user: I like tea") != content_hash("user: I like coffee")
