"""The checked-in OpenAPI document is the app's: regenerate it with `make openapi`."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import create_app
from app.settings import Settings

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_checked_in_spec_matches_the_app() -> None:
    live = create_app(Settings(_env_file=None)).openapi()
    assert json.loads(SPEC.read_text()) == live, "run `make openapi` and commit the result"


def test_every_route_documents_its_errors() -> None:
    spec = json.loads(SPEC.read_text())
    for path, ops in spec["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, op in ops.items():
            codes = set(op["responses"])
            assert "422" in codes, (method, path)
            problem = op["responses"]["422"]["content"]
            assert "application/problem+json" in problem, (method, path)
