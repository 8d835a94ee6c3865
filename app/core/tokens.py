"""Exact BPE token counts with encodings compiled into a PyPI wheel (toktok): no download
at run time, unlike plain tiktoken, and `len/4` is ~45% off on mixed Chinese/English."""

from __future__ import annotations

from collections.abc import Sequence

import toktok


class TokenCounter:
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        toktok.batch_count(["warm up"], encoding)  # loads the ranks once, at start

    def __call__(self, texts: Sequence[str]) -> list[int]:
        # One thread: counts are small and the event loop's thread should not fan out.
        return list(toktok.batch_count(list(texts), self.encoding, threads=1))
