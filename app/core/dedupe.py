"""Near-duplicate detection for promotion: which new turns are memories the user already has.

Two memories are the same when their text is (`content_hash`, blind to case, punctuation
and spacing) and they were said in a context that embeds alike (cosine of their indexed
vectors at or above a threshold): "yes" after two different questions stays two memories.
"""

from __future__ import annotations

import hashlib
import re

_NOT_WORD = re.compile(r"[\W_]+")


def content_hash(text: str) -> str:
    """Of the text with case, punctuation and spacing normalised away."""
    return hashlib.sha256(_NOT_WORD.sub(" ", text.lower()).strip().encode()).hexdigest()
