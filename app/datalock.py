"""One process at a time on an embedded data directory: the api (its lifespan) and the
`strata` commands that open the directory themselves take `<data_dir>/strata.lock`.

Qdrant Edge's shard and the in-process worker belong to one process: a second one writing
the same directory (an import while `strata serve` runs) would corrupt the shard or never
be indexed. The lock is `flock`, so the kernel drops it when its holder dies, even by
SIGKILL. Within one process it is counted, not exclusive: tests start several apps on one
directory, and what it guards against is another process.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType

from app.settings import Settings

LOCK_FILE = "strata.lock"

_held: dict[Path, tuple[int, int]] = {}  # path -> (fd, holders in this process)
_guard = threading.Lock()


class DataDirBusy(Exception):
    """Another process holds the data directory."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        super().__init__(
            f"the data directory {data_dir} is in use by another Strata process ({holder})"
        )
        self.data_dir = data_dir
        self.holder = holder


def uses_data_dir(settings: Settings) -> bool:
    """Whether the settings keep a store in `data_dir` (SQLite or Qdrant Edge)."""
    return settings.is_sqlite or settings.qdrant_url is None


class DataDirLock:
    """`with DataDirLock(settings, "strata serve"):` or `async with`; raises `DataDirBusy`.
    A no-op when no store lives in the data directory (PostgreSQL with a Qdrant server)."""

    def __init__(self, settings: Settings, owner: str) -> None:
        self.path = (settings.data_dir / LOCK_FILE).resolve()
        self.owner = owner
        self.active = uses_data_dir(settings)

    def __enter__(self) -> DataDirLock:
        if self.active:
            _acquire(self.path, self.owner)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.active:
            _release(self.path)

    async def __aenter__(self) -> DataDirLock:
        return self.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(kind, exc, tb)


def _acquire(path: Path, owner: str) -> None:
    with _guard:
        if path in _held:
            fd, count = _held[path]
            _held[path] = (fd, count + 1)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown pid"
            os.close(fd)
            raise DataDirBusy(path.parent, holder) from None
        # Who holds it, for the message another process shows.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, {owner}\n".encode(), 0)
        _held[path] = (fd, 1)


def _release(path: Path) -> None:
    with _guard:
        fd, count = _held[path]
        if count > 1:
            _held[path] = (fd, count - 1)
            return
        del _held[path]
        os.close(fd)  # closing the last descriptor drops the flock
