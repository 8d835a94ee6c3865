"""A memo of a function of one text, bounded by the memory its entries hold.

Scoring analyses each candidate's text once and keeps the result (`app/services/search.py`):
a user's memories come back recall after recall. `functools.lru_cache` bounds such a memo
by its count of entries, but an entry holds its text as its key, and a memory's text runs
from a few words to 32,000 characters: 100,000 entries of LongMemEval-like assistant turns
(~1.5k characters) would hold ~300 MB. This memo counts each entry's text
(`sys.getsizeof`, which sees one, two or four bytes a character) plus a fixed cost per entry
for its key and result, and forgets the least recently used entries beyond `max_bytes`.
A text larger than the whole budget is computed and not kept.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

R = TypeVar("R")


class TextMemo(Generic[R]):
    """`fn(text, *rest)` memoised by all its arguments (hashable), least recently used out
    first once the entries' bytes pass `max_bytes`. Safe to call from several threads (the
    index's search thread asks `states_change` of its hits)."""

    __wrapped__: Callable[..., R]  # the function itself, uncached (`functools.update_wrapper`)

    def __init__(
        self,
        fn: Callable[..., R],
        max_bytes: int,
        entry_bytes: int,
        value_bytes: Callable[[R], int] | None = None,
    ) -> None:
        self._fn = fn
        self.max_bytes = max_bytes
        self.entry_bytes = entry_bytes  # the key tuple, the result's tuple, the dict's slot
        self._value_bytes = value_bytes  # what a result holds beyond that, if it varies
        self._entries: OrderedDict[tuple[Any, ...], tuple[R, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *key: Any) -> R:
        """`fn(*key)`, the first of `key` its text. The arguments are the key as they come
        (no tuple built again, no names bound): a recall makes ~300 lookups."""
        # A hit takes no lock (scoring looks up ~200 texts a recall): each of the ordered
        # dict's operations holds the GIL, and a key another thread evicts between the two
        # is simply not moved.
        entries = self._entries
        found = entries.get(key)
        if found is not None:
            try:  # noqa: SIM105 - contextlib.suppress costs twice the lookup itself
                entries.move_to_end(key)
            except KeyError:
                pass
            return found[0]
        return self._compute(key)

    def _compute(self, key: tuple[Any, ...]) -> R:
        """`fn(*key)`, kept unless its text alone is over the budget."""
        text: str = key[0]
        value = self._fn(*key)
        cost = sys.getsizeof(text) + self.entry_bytes
        if self._value_bytes is not None:
            cost += self._value_bytes(value)
        if cost > self.max_bytes:
            return value
        with self._lock:
            if key not in self._entries:  # another thread may have kept it meanwhile
                self._entries[key] = (value, cost)
                self._bytes += cost
                while self._bytes > self.max_bytes:
                    _, (_, freed) = self._entries.popitem(last=False)
                    self._bytes -= freed
        return value

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[Any, ...]) -> bool:
        """Whether `fn(*key)` is held, without computing it or moving it."""
        return key in self._entries

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class text_memo:  # noqa: N801 - used as a decorator, like functools.lru_cache
    """`@text_memo(16 << 20)` over a function whose first argument is the text. The default
    `entry_bytes` is a small result's: key tuple, ordered dict node, (result, cost) pair."""

    def __init__(
        self,
        max_bytes: int,
        entry_bytes: int = 250,
        value_bytes: Callable[[Any], int] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.entry_bytes = entry_bytes
        self.value_bytes = value_bytes

    def __call__(self, fn: Callable[..., R]) -> TextMemo[R]:
        return TextMemo(fn, self.max_bytes, self.entry_bytes, self.value_bytes)
