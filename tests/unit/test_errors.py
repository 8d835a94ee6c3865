"""The registry of problem codes: one class per code, each documented, each spelled once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.errors import (
    AppError,
    Conflict,
    InvalidInput,
    NotFound,
    SessionNotFound,
    Unavailable,
    registered,
)

APP = Path(__file__).resolve().parents[2] / "app"


def test_every_code_is_registered_once_with_its_documentation() -> None:
    kinds = registered()
    codes = [kind.code for kind in kinds]
    assert len(codes) == len(set(codes))
    for kind in kinds:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", kind.code), kind
        assert 400 <= kind.status < 600, kind
        assert kind.title, kind
        assert kind.description, kind
        assert "\n" not in kind.description, kind


def test_the_http_level_problems_are_registered() -> None:
    expected = {
        "bad_request": 400,
        "unauthorized": 401,
        "forbidden": 403,
        "not_found": 404,
        "method_not_allowed": 405,
        "payload_too_large": 413,
        "unsupported_media_type": 415,
        "validation_error": 422,
        "internal_error": 500,
    }
    statuses = {kind.code: kind.status for kind in registered()}
    assert {code: statuses.get(code) for code in expected} == expected


def test_a_code_declared_twice_is_refused() -> None:
    with pytest.raises(TypeError, match="already registered"):
        type("Again", (NotFound,), {"code": "session_not_found", "title": "t", "description": "d"})
    with pytest.raises(TypeError, match="must declare"):
        type("Bare", (NotFound,), {})


@pytest.mark.parametrize("family", [AppError, Conflict, Unavailable])
def test_a_family_has_no_code_of_its_own_to_raise(family: type[AppError]) -> None:
    with pytest.raises(TypeError, match="abstract"):
        family("nothing in particular")


def test_a_member_carries_its_family_status() -> None:
    error = SessionNotFound("s-1")
    assert isinstance(error, NotFound)
    assert (error.status, error.code, error.detail) == (
        404,
        "session_not_found",
        "no session 's-1' for this user",
    )
    invalid = InvalidInput("messages.0.content", "must not be blank")
    assert invalid.errors == [
        {
            "loc": ["body", "messages", "0", "content"],
            "field": "messages.0.content",
            "msg": "must not be blank",
        }
    ]


def test_codes_are_spelled_only_in_the_registry() -> None:
    """A code written as a string elsewhere in the app is a second registry."""
    pattern = re.compile("|".join(rf"[\"']{kind.code}[\"']" for kind in registered()))
    for path in APP.rglob("*.py"):
        if path != APP / "errors.py":
            found = pattern.findall(path.read_text())
            assert not found, (path, found)
