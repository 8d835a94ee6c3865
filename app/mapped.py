"""The pages of an index's files that a load leaves mapped in the process, let go.

Qdrant Edge maps its files shared (`mmap(MAP_SHARED)`), and a page once read stays in the
process's resident set until the mapping is closed. Loading a shard reads some files
whole: the write-ahead log (two 32 MiB segments, read to find where it ends), the sparse
vectors (read by the count of each user's terms, `QdrantEdgeIndex._recount_terms`), most
of the payload pages; at 100k memories ~150 MiB that no search reads again
(docs/reliability.md, "Memory at 100k memories"). `release` drops them from the process's
page tables (`madvise(MADV_DONTNEED)`): the file's pages stay in the page cache, so what a
search reads next is a minor fault, not a disk read, and nothing written is lost (on a
shared mapping a dirty page stays dirty in the page cache and is written back as before).

Only shared mappings of files under the given directory are touched, and only while no
call into their shard can map or unmap them (the caller holds the shard, or it is not in
use yet): `MADV_DONTNEED` on a private mapping would discard its pages. Elsewhere than
Linux nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import re
from collections.abc import Callable
from pathlib import Path
from typing import cast

log = logging.getLogger("strata.memory")

_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s+(.*)$")


def _madvise() -> Callable[[int, int, int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        fn = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int], int], fn)


_MADVISE = _madvise()


def shared_mappings(directory: Path, maps: str) -> list[tuple[int, int]]:
    """The (start, end) of each shared mapping in `maps` (`/proc/PID/maps`'s text) of a file
    under `directory`."""
    prefix = str(directory.resolve()).rstrip("/") + "/"
    ranges = []
    for line in maps.splitlines():
        m = _MAPPING.match(line)
        if m and m.group(3)[3] == "s" and m.group(4).startswith(prefix):
            ranges.append((int(m.group(1), 16), int(m.group(2), 16)))
    return ranges


def release(directory: Path) -> int:
    """Drop the resident pages of every shared mapping of a file under `directory` from this
    process (module docstring); the caller holds the shard that maps them. Returns the bytes
    of the mappings advised (0 where it cannot be done)."""
    if _MADVISE is None:
        return 0
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return 0
    advised = 0
    for start, end in shared_mappings(directory, maps):
        if _MADVISE(start, end - start, mmap.MADV_DONTNEED) == 0:
            advised += end - start
    log.debug("released the mapped pages of %s: %d MiB of mappings", directory, advised >> 20)
    return advised
