"""Generated clients get a model wherever the answer has a known shape (docs/clients.md):
the OpenAPI document leaves an object free-form, or a map of any key, only where it is so by
design."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"

# What a caller writes as it likes: metadata, scratchpad data, profile attributes, audit
# snapshots, and a job's payload and result (their shape is the kind's).
FREE_FORM = {
    "ContextProfile.attributes",
    "ContextSections.working_memory",
    "ExportedEvent.old",
    "ExportedEvent.new",
    "ExportedJob.payload",
    "ExportedJob.result",
    "ExportedMemory.metadata",
    "ExportedMessage.metadata",
    "ExportedScratchpad.data",
    "ExportedSession.metadata",
    "ExportedUser.profile",
    "JobOut.result",
    "MemoryCreate.metadata",
    "MemoryEventOut.old",
    "MemoryEventOut.new",
    "MemoryOut.metadata",
    "MemoryPatch.metadata",
    "MessageIn.metadata",
    "MessageOut.metadata",
    "Profile.attributes",
    "RecallResult.metadata",
    "ScratchpadOut.data",
    "ScratchpadPut.data",
    "SessionOut.metadata",
    "SessionUpsert.metadata",
}
# Maps keyed by a name the answer gives (a section, a check), with typed values.
MAPS = {"ContextResponse.truncated", "Readiness.checks"}


def _untyped(node: Any, *, maps: bool) -> bool:
    """Whether `node` (or an item or alternative of it) is an object without properties:
    of any values, or with `maps`, of typed values under free keys."""
    if not isinstance(node, dict):
        return False
    if node == {}:
        return True
    if node.get("type") == "object" and "properties" not in node:
        values = node.get("additionalProperties", True)
        return bool(values) if maps else values in (True, {})
    alternatives = [*node.get("anyOf", []), *node.get("oneOf", [])]
    if "items" in node:
        alternatives.append(node["items"])
    return any(_untyped(a, maps=maps) for a in alternatives)


def _fields(maps: bool) -> set[str]:
    schemas: dict[str, Any] = json.loads(SPEC.read_text())["components"]["schemas"]
    return {
        f"{name}.{field}"
        for name, schema in schemas.items()
        for field, node in schema.get("properties", {}).items()
        if _untyped(node, maps=maps)
    }


def test_only_free_form_fields_are_untyped_objects() -> None:
    assert _fields(maps=False) == FREE_FORM


def test_maps_of_typed_values_are_only_the_named_ones() -> None:
    assert _fields(maps=True) - FREE_FORM == MAPS
