"""The request types every route shares: `Text` (stored or queried text), `Identifier`, and
the JSON media types the gate reads (app/schemas/common.py, app/api/deps.py)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import TypeAdapter, ValidationError

from app.api.deps import is_json
from app.schemas.common import Identifier, Text

Name = TypeAdapter(Annotated[str, Text(5, min_length=1, strip=True)])
Label = TypeAdapter(Annotated[str, Text(5)])
Ids = TypeAdapter(Identifier)


@pytest.mark.parametrize(("value", "stored"), [(" x ", "x"), ("abcd  ", "abcd"), ("é", "é")])
def test_text_strips_before_it_counts(value: str, stored: str) -> None:
    assert Name.validate_python(value) == stored


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("   ", "at least 1 character"),
        ("abcdef", "at most 5 characters"),
        ("a\x00b", "NUL"),
        ("a\udc00", "lone surrogates|unicode string"),
    ],
)
def test_text_refuses_what_no_store_can_hold(value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Name.validate_python(value)


def test_text_may_be_empty_unless_told_otherwise() -> None:
    assert Label.validate_python("") == ""
    with pytest.raises(ValidationError, match="NUL"):
        Label.validate_python("\x00")


@pytest.mark.parametrize("value", ["user-42", "a.b", ".a", "a.", "..a", "a:b@c", "_", "-"])
def test_identifiers_with_a_character_besides_dots_are_taken(value: str) -> None:
    assert Ids.validate_python(value) == value


@pytest.mark.parametrize("value", [".", "..", "...", "." * 128, "", "a/b", "a b", "x" * 129])
def test_identifiers_of_dots_alone_or_other_characters_are_refused(value: str) -> None:
    with pytest.raises(ValidationError):
        Ids.validate_python(value)


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("APPLICATION/JSON", True),
        ("application/merge-patch+json", True),
        ("application/problem+json", True),
        ("text/plain", False),
        ("text/json", False),
        ("application/xml", False),
        ("application/x-www-form-urlencoded", False),
        ("application/jsonp", False),
        ("", False),
        (None, False),
    ],
)
def test_json_media_types(content_type: str | None, json: bool) -> None:
    assert is_json(content_type) is json


@pytest.mark.parametrize("value", [1e20, -1e19, 9.3e18])
def test_a_json_number_past_64_bits_is_refused(value: float) -> None:
    """PostgreSQL's jsonb turns 1e20 into an integer past 64 bits (docs/reliability.md)."""
    from app.schemas.common import JsonObject, Metadata

    for kind in (JsonObject, Metadata):
        with pytest.raises(ValidationError, match="64-bit"):
            TypeAdapter(kind).validate_python({"n": value})
    assert TypeAdapter(JsonObject).validate_python({"n": 9e18, "x": 2.5}) == {"n": 9e18, "x": 2.5}
