"""Request bodies are strict (`StrictModel`), under which pydantic takes a datetime, a date
or a UUID only as a Python object, never as the string JSON carries: each such field must
use the types of `app.schemas.common` that take the string (`IsoDatetime`, `IsoDate`,
`Uuid`, or `EventTime`/`InstantTime`). This walks every request model and names any that
does not, before a client finds every request of that route refused."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

import app.schemas
from app.schemas.common import StrictModel
from app.schemas.ingest import IngestRequest
from app.schemas.recall import RecallRequest
from app.schemas.summaries import SummarizeRequest

STRING_TYPES = {"datetime", "date", "time", "timedelta", "uuid", "decimal"}


def _request_models() -> list[type[StrictModel]]:
    for module in pkgutil.iter_modules(app.schemas.__path__):
        importlib.import_module(f"app.schemas.{module.name}")
    found: list[type[StrictModel]] = []
    todo = list(StrictModel.__subclasses__())
    while todo:
        model = todo.pop()
        found.append(model)
        todo.extend(model.__subclasses__())
    return found


def _strict_string_types(node: Any, path: str = "") -> list[str]:
    """Paths of the core-schema nodes that would refuse their JSON string."""
    bad = []
    if isinstance(node, dict):
        if node.get("type") in STRING_TYPES and node.get("strict") is not False:
            bad.append(f"{path} ({node['type']})")
        for key, value in node.items():
            bad.extend(_strict_string_types(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            bad.extend(_strict_string_types(value, f"{path}/{i}"))
    return bad


def test_every_request_model_takes_times_and_uuids_as_strings() -> None:
    models = _request_models()
    assert len(models) >= 10
    bad = {
        model.__name__: found
        for model in models
        if (found := _strict_string_types(model.__pydantic_core_schema__))
    }
    assert bad == {}, "use IsoDatetime, IsoDate or Uuid from app.schemas.common"


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (RecallRequest, {"user_id": "u", "query": "q", "top_k": "10"}),
        (RecallRequest, {"user_id": "u", "query": "q", "top_k": True}),
        (RecallRequest, {"user_id": "u", "query": "q", "as_of": 0}),
        (RecallRequest, {"user_id": "u", "query": "q", "reinforce": 1}),
        (
            IngestRequest,
            {"user_id": "u", "messages": [{"role": "user", "content": "x"}], "wait": 0},
        ),
        (IngestRequest, {"user_id": 5, "messages": [{"role": "user", "content": "x"}]}),
        (SummarizeRequest, {"user_id": "u", "level": "daily", "period_start": 0}),
    ],
)
def test_json_types_are_not_coerced(model: type[StrictModel], body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(model).validate_python(body)


def test_strings_of_times_and_integral_numbers_are_taken() -> None:
    body = {
        "user_id": "u",
        "query": "q",
        "top_k": 10.0,
        "as_of": "2025-11-03T10:00:00+01:00",
        "time_range": {"from": "2025-11-01T00:00:00Z"},
    }
    parsed = TypeAdapter(RecallRequest).validate_python(body)
    assert parsed.top_k == 10
    assert parsed.as_of is not None
    assert parsed.as_of.isoformat() == "2025-11-03T09:00:00+00:00"
