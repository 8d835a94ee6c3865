"""A profile's structured attributes: JSON merge-patch (RFC 7396), pure."""

from __future__ import annotations

from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 §2: an object patch merges member by member (null removes a member);
    any other patch value replaces the target whole."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
