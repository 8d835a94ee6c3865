"""The checked-in OpenAPI document is the app's (regenerate it with `make openapi`), and it
documents every error answer as problem+json, from the registry of codes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.errors import registered
from app.main import create_app
from app.settings import Settings

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
PROBLEM = {"$ref": "#/components/schemas/Problem"}


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(SPEC.read_text())
    return spec


def _v1_operations() -> Iterator[tuple[str, dict[str, Any]]]:
    for path, ops in _spec()["paths"].items():
        if path.startswith("/v1/"):
            for method, op in ops.items():
                yield f"{method.upper()} {path}", op


def test_checked_in_spec_matches_the_app() -> None:
    live = create_app(Settings(_env_file=None)).openapi()
    assert _spec() == live, "run `make openapi` and commit the result"


def test_every_route_documents_its_errors() -> None:
    for name, op in _v1_operations():
        statuses = {"401", "422", "500", "503"} | ({"400"} if "requestBody" in op else set())
        assert statuses <= set(op["responses"]), name
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            # problem+json only: a client must not be told to expect FastAPI's shapes.
            assert list(response["content"]) == ["application/problem+json"], (name, status)
            assert response["content"]["application/problem+json"]["schema"] == PROBLEM


def test_each_error_response_names_registered_codes_of_its_status() -> None:
    by_code = {kind.code: kind for kind in registered()}
    spec = _spec()
    for name, op in _v1_operations():
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            codes = re.findall(r"^- `([a-z_]+)`", response["description"], re.MULTILINE)
            examples = response["content"]["application/problem+json"]["examples"]
            assert codes, (name, status)
            assert codes == list(examples), (name, status)
            for code in codes:
                assert by_code[code].status == int(status), (name, code)
                assert examples[code] == {"$ref": f"#/components/examples/{code}"}
                assert spec["components"]["examples"][code]["value"]["code"] == code


def test_fastapi_validation_shapes_are_gone() -> None:
    schemas = _spec()["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert "ValidationError" not in schemas
    assert set(schemas["Problem"]["required"]) == {
        "type",
        "title",
        "status",
        "detail",
        "code",
        "request_id",
    }


def test_operation_ids_are_short_verbs_a_client_exposes_as_they_are() -> None:
    ids = [op["operationId"] for ops in _spec()["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    for op_id in ids:
        assert re.fullmatch(r"[a-z]+(_[a-z]+){0,3}", op_id), op_id
    assert {"recall", "add_messages", "get_context", "get_scratchpad"} <= set(ids)
