"""The process's C heap (glibc malloc): fewer arenas, big buffers given back, and a trim when
the worker falls idle after a backlog; and the Python objects start-up built, put out of the
cyclic collector's reach. Measured in docs/reliability.md ("Memory").

glibc gives each thread that allocates its own arena (up to 8 per core), and the api runs
about thirty threads (embedding, SQLite connections, the index, `to_thread`); each arena keeps
what it once held. Its mmap threshold also grows to 32 MB after a big block is freed, so the
encoder's padded batch tensors then come from the arenas and stay there. Both are set once,
at start, before the threads exist; elsewhere than glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from dataclasses import dataclass

log = logging.getLogger("strata.memory")

# mallopt(3) parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - only glibc has it
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def tune_malloc(arena_max: int, mmap_threshold: int) -> bool:
    """At most `arena_max` arenas, blocks of `mmap_threshold` bytes or more mapped apart
    (and unmapped when freed); 0 leaves a setting alone. True when glibc took them."""
    if _LIBC is None:
        return False
    ok = True
    if arena_max > 0:
        ok = bool(_LIBC.mallopt(M_ARENA_MAX, arena_max)) and ok
    if mmap_threshold > 0:
        # Setting it fixes it (no growth), and the heap is trimmed above twice that.
        ok = bool(_LIBC.mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and ok
        ok = bool(_LIBC.mallopt(M_TRIM_THRESHOLD, 2 * mmap_threshold)) and ok
    return ok


def trim() -> bool:
    """Give the free pages of every arena back to the system; True if any were."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))


def freeze_long_lived(*, collect: bool = True) -> int:
    """Put every object tracked now out of the cyclic collector's reach (`gc.freeze`): the
    modules, the encoder, jieba's dictionaries, ~140k objects once started. A full
    collection walks every tracked object while holding the GIL, and under 8 concurrent
    recalls one stalled them all for 94 ms; with start-up frozen, 17 ms. What is frozen is
    never collected (freed by reference counting still), so this runs once start-up is
    done, and again after a big lazy load (`collect=False`: no pause for it then).
    Returns how many objects are frozen."""
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass
class Trimmer:
    """When to trim: once the worker is idle after at least `after_messages` were promoted,
    and not more often than every `min_seconds` (a trim walks every arena)."""

    after_messages: int
    min_seconds: float = 5.0
    pending: int = 0
    last: float = 0.0
    trims: int = 0

    def promoted(self, messages: int) -> None:
        self.pending += messages

    def due(self, now: float) -> bool:
        return (
            self.after_messages > 0
            and self.pending >= self.after_messages
            and now - self.last >= self.min_seconds
        )

    def idle(self, now: float | None = None) -> bool:
        """The worker found no work: trim if due. True when it trimmed."""
        now = time.monotonic() if now is None else now
        if not self.due(now):
            return False
        started = time.perf_counter()
        trim()
        self.pending, self.last = 0, now
        self.trims += 1
        log.debug("heap trimmed in %.1f ms", (time.perf_counter() - started) * 1000)
        return True
