"""The export document as its sections write it: valid JSON in the listed order, whatever
the pieces, and sections with clashing names refused at start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.services.users import ExportSection, ExportService, _array


async def _items(values: list[Any]) -> AsyncIterator[Any]:
    for v in values:
        yield v


def _section(name: str, values: list[Any]) -> ExportSection:
    async def write(tenant_id: str, user_id: str) -> AsyncIterator[bytes]:
        async for chunk in _array(_items(values)):
            yield chunk

    return ExportSection(name, write)


async def _document(service: ExportService) -> dict[str, Any]:
    pieces = [chunk async for chunk in service._document("t", "u")]
    body: dict[str, Any] = orjson.loads(b"".join(pieces))
    return body


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.lists(st.lists(json_values, max_size=6), min_size=1, max_size=4))
async def test_the_document_is_json_with_every_section_in_order(sections: list[list[Any]]) -> None:
    names = [f"s{i}" for i in range(len(sections))]
    service = ExportService(None, [_section(n, v) for n, v in zip(names, sections, strict=True)])  # type: ignore[arg-type]
    doc = await _document(service)
    assert doc["sections"] == names
    assert list(doc) == ["format", "user_id", "exported_at", "sections", *names]
    for name, values in zip(names, sections, strict=True):
        assert doc[name] == values


async def test_a_large_section_comes_in_blocks_not_one_piece() -> None:
    values = [{"n": i, "text": "x" * 100} for i in range(5000)]
    service = ExportService(None, [_section("big", values)])  # type: ignore[arg-type]
    pieces = [chunk async for chunk in service._document("t", "u")]
    assert len(pieces) > 5
    assert max(len(p) for p in pieces) < 2 * 64 * 1024
    assert orjson.loads(b"".join(pieces))["big"] == values


@pytest.mark.parametrize("names", [["a", "a"], ["format"], ["sections"], ["user_id"]])
def test_clashing_section_names_are_refused(names: list[str]) -> None:
    with pytest.raises(ValueError, match="distinct, free names"):
        ExportService(None, [_section(n, []) for n in names])  # type: ignore[arg-type]
