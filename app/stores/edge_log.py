"""A built shard's write-ahead log replaced by an empty one that goes on with its numbering.

A graph build's copy is flushed and closed by its child process (`app/stores/qdrant_edge.py`),
so its segments hold every write: its log, copied from the live shard, holds nothing the
copy needs. Loading the copy beside the live shard still replayed all of it (Edge keeps the
closed segments after a flush, up to two of 32 MiB here): ~115 MiB of heap for the load's
seconds at 100k points, the top of the api's RSS during an import (docs/reliability.md,
"Memory at 100k memories"). Edge's Python API cannot truncate its log, so the child
replaces it on disk, once the shard is closed, with an empty log that starts after the
copy's last operation.

The log's format is Qdrant's `wal` crate: segment files `open-<id>` (to append to) and
`closed-<first index>`; the next operation's number is the last closed segment's first
index plus its entries. An empty closed segment (its 8-byte header alone: magic `wal`,
format 0, a CRC seed) named `closed-<n>` makes the next operation `n`, and Edge creates
the open segments itself. `n` must be above the version of every segment (a segment skips
an operation numbered below its version, as a replay does): the highest of the segments'
versions and the log's acknowledged index, plus one. A gap in the numbers is harmless.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("strata.index")

# Qdrant's `wal` crate: the header of a segment, then entries (none here).
_SEGMENT_HEADER = b"wal\x00"


def next_operation(shard: Path) -> int | None:
    """The number the next write to the closed shard at `shard` may take: above every
    segment's version and the log's acknowledged index. None when either cannot be read
    (the log is then left as it is)."""
    try:
        acked = int(json.loads((shard / "wal" / "first-index").read_text())["ack_index"])
        versions = [
            int(json.loads(p.read_text()).get("version") or 0)
            for p in (shard / "segments").glob("*/segment.json")
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return max([acked, *versions]) + 1


def start_afresh(shard: Path) -> int | None:
    """Replace the log of the flushed and closed shard at `shard` with an empty one whose
    next operation is `next_operation`; returns that number, or None when the log was
    left as it is. Not for a live shard: its log is what a crash is recovered from."""
    start = next_operation(shard)
    if start is None:
        log.warning("the write-ahead log of %s is kept: its numbering cannot be read", shard)
        return None
    wal, fresh, old = shard / "wal", shard / "wal.fresh", shard / "wal.old"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    (fresh / f"closed-{start}").write_bytes(_SEGMENT_HEADER + os.urandom(4))
    (fresh / "first-index").write_text(json.dumps({"ack_index": start - 1}, separators=(",", ":")))
    os.replace(wal, old)
    os.replace(fresh, wal)
    shutil.rmtree(old, ignore_errors=True)
    return start
