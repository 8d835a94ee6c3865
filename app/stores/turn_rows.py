"""Each point's `turn` vector in a file beside the shard, read with `preadv` for a recall's
candidates only (docs/reliability.md, "Memory at 100k memories").

The `turn` vector is compared with the query and among candidates, never searched for
neighbours. Held by Qdrant as an int8 copy in memory it cost 512 bytes a point of the
process's resident set (49 MiB at 100k memories); mapped from disk its pages would count
there too once read (and with the 16 pages around each). Read with positional reads, the
rows stay in the kernel's page cache, as the encoder's piece table does
(`app/providers/piece_table.py`): a recall reads its ~60 candidates' rows.

One row a point: its id (16 bytes), then the vector as float16, normalized as the shard
stores it. A row whose id is all zeros is free: a deleted point's row is overwritten with
zeros (no byte of an erased point stays in the file) and reused. The process holds the
ids alone, sorted, with their rows (24 bytes a point).

The shard stays the truth: a row is read back from the shard after its write (bit for bit
the stored vector) and zeroed after its delete, and at open (`reconcile`) the file is
matched to the shard's points, rows for points it lacks read from the shard, rows of
points it does not hold zeroed. So a crash between the two writes, or a file lost or from
an older release, is mended by the next open; until then a point without a row is compared
on the shard's own vectors.
Called under the index's lock, as the shard is.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

_ID = 16  # bytes of a point's id at the head of its row
_FREE = b"\0" * _ID
# Rows read at once when the file is scanned at open.
_SCAN_ROWS = 4096


def _f16(vector: Sequence[float]) -> npt.NDArray[np.float16]:
    return np.asarray(vector, dtype=np.float32).astype(np.float16)


class TurnRows:
    """The rows file at `path` for vectors of `dim` floats."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path = path
        self.dim = dim
        self.row_bytes = _ID + 2 * dim
        self._fd: int | None = None
        self._ids = np.empty(0, dtype="S16")  # sorted
        self._rows = np.empty(0, dtype=np.int64)  # the row of each id in `_ids`
        self._free: list[int] = []
        self._end = 0  # rows in the file

    def open(self) -> None:
        """Open (or create) the file and read its ids."""
        self.close()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        size = os.fstat(self._fd).st_size
        self._end = size // self.row_bytes
        if size % self.row_bytes:  # a row cut short by a crash: dropped
            os.ftruncate(self._fd, self._end * self.row_bytes)
        ids: list[npt.NDArray[Any]] = []
        buf = np.empty((_SCAN_ROWS, self.row_bytes), dtype=np.uint8)
        for start in range(0, self._end, _SCAN_ROWS):
            n = min(_SCAN_ROWS, self._end - start)
            got = os.preadv(self._fd, [buf[:n].data], start * self.row_bytes)
            if got != n * self.row_bytes:
                raise OSError(f"{self.path} was cut short while read")
            ids.append(np.ascontiguousarray(buf[:n, :_ID]).view("S16").reshape(-1).copy())
        every = np.concatenate(ids) if ids else np.empty(0, dtype="S16")
        rows = np.arange(len(every), dtype=np.int64)
        used = every != _FREE
        self._free = rows[~used].tolist()[::-1]  # the lowest reused first
        every, rows = every[used], rows[used]
        order = np.argsort(every, kind="stable")
        self._ids, self._rows = every[order], rows[order]
        # An id written twice (a crash between a row's write and the zeroing of its old
        # one cannot do it, but a file is only trusted so far): the later row kept.
        if len(self._ids) > 1:
            dup = np.flatnonzero(self._ids[1:] == self._ids[:-1])
            if len(dup):
                self._zero(self._rows[dup].tolist())
                self._free.extend(self._rows[dup].tolist())
                keep = np.ones(len(self._ids), dtype=bool)
                keep[dup] = False
                self._ids, self._rows = self._ids[keep], self._rows[keep]

    def __len__(self) -> int:
        return len(self._ids)

    def _fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def _find(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The row of each key, -1 where it has none."""
        if not len(self._ids):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.searchsorted(self._ids, keys)
        at = np.minimum(at, len(self._ids) - 1)
        found = self._ids[at] == keys
        return np.where(found, self._rows[at], -1)

    def read(self, ids: Sequence[uuid.UUID]) -> tuple[list[uuid.UUID], npt.NDArray[np.float16]]:
        """The points among `ids` that have a row, and their vectors (`read_at`)."""
        at, vectors = self.read_at(ids)
        return [ids[i] for i in at], vectors

    def read_at(self, ids: Sequence[uuid.UUID]) -> tuple[list[int], npt.NDArray[np.float16]]:
        """Where among `ids` the points that have a row are (in order), and their vectors
        (one row each of a (n, dim) matrix): one positional read a run of adjacent rows (a
        recall's candidates are often neighbouring turns: ~2.3 rows a run on LoCoMo, and a
        read was ~1.8 us a row), the ids checked at once."""
        fd = self._fileno()
        keys = _keys(ids)
        rows = self._find(keys)
        at = np.flatnonzero(rows >= 0)
        width = self.row_bytes
        order = np.argsort(rows[at], kind="stable")  # read in the file's order
        placed = rows[at][order]
        buf = np.empty((len(at), width), dtype=np.uint8)
        flat = buf.reshape(-1).data
        whole = np.ones(len(at), dtype=bool)
        cuts = [0, *(np.flatnonzero(np.diff(placed) != 1) + 1).tolist(), len(at)]
        offsets = (placed * width).tolist()
        for start, end in itertools.pairwise(cuts):
            if start == end:
                continue
            got = os.preadv(fd, [flat[start * width : end * width]], offsets[start])
            if got != (end - start) * width:  # past the end: the shard's own vectors instead
                whole[start + got // width : end] = False
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        buf, whole = buf[back], whole[back]  # in the order of `ids`
        read = np.ascontiguousarray(buf[:, :_ID]).view("S16").reshape(-1)
        ok = whole & (read == keys[at])
        found: list[int] = at[ok].tolist()
        return found, buf[ok, _ID:].view(np.float16)

    def get(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, npt.NDArray[np.float16]]:
        """`read` as a map from each found point to its vector."""
        found, vectors = self.read(ids)
        return dict(zip(found, vectors, strict=True))

    def put(self, vectors: Sequence[tuple[uuid.UUID, npt.NDArray[np.float16]]]) -> None:
        """Write each point's row: over its own row when it has one, else in a free row or
        at the end."""
        if not vectors:
            return
        fd = self._fileno()
        latest = dict(vectors)  # an id given twice: its last vector
        ids = list(latest)
        keys = _keys(ids)
        rows = self._find(keys)
        new_keys, new_rows = [], []
        for n, pid in enumerate(ids):
            row = int(rows[n])
            if row < 0:
                row = self._free.pop() if self._free else self._take_end()
                new_keys.append(keys[n])
                new_rows.append(row)
            vector = latest[pid]
            if vector.shape != (self.dim,):
                raise ValueError(f"a turn vector of {vector.shape} for {self.dim} dimensions")
            data = pid.bytes + np.ascontiguousarray(vector, dtype=np.float16).tobytes()
            if os.pwrite(fd, data, row * self.row_bytes) != self.row_bytes:
                raise OSError(f"short write to {self.path}")
        if new_keys:
            added = np.array(new_keys, dtype="S16")
            order = np.argsort(added)
            added, placed = added[order], np.array(new_rows, dtype=np.int64)[order]
            at = np.searchsorted(self._ids, added)
            self._ids = np.insert(self._ids, at, added)
            self._rows = np.insert(self._rows, at, placed)

    def _take_end(self) -> int:
        row = self._end
        self._end += 1
        return row

    def drop(self, ids: Sequence[uuid.UUID]) -> None:
        """Zero the rows of `ids` (those that have one) and free them."""
        if not ids or not len(self._ids):
            return
        keys = _keys(ids)
        rows = self._find(keys)
        gone = rows >= 0
        if not gone.any():
            return
        rows = rows[gone]
        self._zero(rows.tolist())
        keep = ~np.isin(self._rows, rows)
        self._ids, self._rows = self._ids[keep], self._rows[keep]
        self._free.extend(sorted(rows.tolist(), reverse=True))

    def _zero(self, rows: list[int]) -> None:
        fd = self._fileno()
        blank = bytes(self.row_bytes)
        for row in rows:
            os.pwrite(fd, blank, row * self.row_bytes)

    def reconcile(self, shard: Any) -> tuple[int, int]:
        """Match the file to the shard's points (at open): the rows of points the shard
        lacks zeroed, the vectors of points without a row read from the shard and written.
        (rows written, rows zeroed)."""
        import qdrant_edge as qe

        held: list[bytes] = []
        offset: Any = None
        while True:
            records, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=4096, with_payload=False, with_vector=False)
            )
            held.extend(_as_uuid(r.id).bytes for r in records)
            if offset is None:
                break
        in_shard = np.sort(np.array(held, dtype="S16")) if held else np.empty(0, dtype="S16")
        stale = ~np.isin(self._ids, in_shard)
        zeroed = int(stale.sum())
        if zeroed:
            self.drop([uuid.UUID(bytes=k.ljust(_ID, b"\0")) for k in self._ids[stale].tolist()])
        missing = in_shard[self._find(in_shard) < 0]
        ids = [uuid.UUID(bytes=k.ljust(_ID, b"\0")) for k in missing.tolist()]
        return self.copy_from(shard, ids), zeroed

    def copy_from(self, shard: Any, ids: Sequence[uuid.UUID]) -> int:
        """Write the rows of `ids` from the shard's stored vectors: after each write, and
        at open for the points without one. Read back rather than computed from what was
        written, so that a row holds the shard's vector bit for bit (its normalization
        rounds differently from numpy's in ~1 point of 60). The points the shard lacks
        are skipped; how many rows were written."""
        written = 0
        for start in range(0, len(ids), 1024):
            chunk = list(ids[start : start + 1024])
            records = shard.retrieve(chunk, with_payload=False, with_vector=["turn"])
            found = []
            for r in records:
                vector = r.vector.get("turn") if isinstance(r.vector, dict) else None
                if vector:  # stored as float16 and normalized: exact again as float16
                    found.append((_as_uuid(r.id), _f16(vector)))
            self.put(found)
            written += len(found)
        return written

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


def _keys(ids: Sequence[uuid.UUID]) -> npt.NDArray[Any]:
    """The ids as 16-byte keys: `UUID.bytes` itself, without its property's call."""
    return np.frombuffer(b"".join([pid.int.to_bytes(16, "big") for pid in ids]), dtype="S16")


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
