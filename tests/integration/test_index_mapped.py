"""The pages of the index's files that a load leaves mapped are let go (`app/mapped.py`):
the process no longer holds them, their contents (written ones too) are intact, and
nothing but shared mappings under the directory is touched."""

from __future__ import annotations

import asyncio
import mmap
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from app import mapped
from app.core import terms
from app.stores.qdrant_edge import RELEASE_AFTER_POINTS, QdrantEdgeIndex
from app.stores.vectors import VectorQuery
from tests.integration.test_index_quantized import DIM, points

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")

SIZE = 4 << 20


def resident_kib(path: Path) -> int:
    """This process's resident KiB of its mappings of `path`."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = line.rstrip().endswith(str(path))
        elif current and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def mapped_file(path: Path, *, shared: bool) -> mmap.mmap:
    path.write_bytes(b"\0" * SIZE)
    with path.open("r+b") as f:
        flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
        m = mmap.mmap(f.fileno(), SIZE, flags=flags)
    for offset in range(0, SIZE, 4096):
        m[offset] = 7  # every page resident (and written)
    return m


def test_a_shared_mapping_is_let_go_and_what_was_written_stays(tmp_path: Path) -> None:
    m = mapped_file(tmp_path / "wal", shared=True)
    assert resident_kib(tmp_path / "wal") >= SIZE // 1024
    assert mapped.release(tmp_path) == SIZE
    assert resident_kib(tmp_path / "wal") == 0
    assert (tmp_path / "wal").read_bytes()[::4096] == b"\7" * (SIZE // 4096)
    assert m[4096] == 7  # read back through the mapping: faulted in again
    m.close()


def test_a_private_mapping_or_one_elsewhere_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "shard").mkdir()
    private = mapped_file(tmp_path / "shard" / "private", shared=False)
    elsewhere = mapped_file(tmp_path / "other", shared=True)
    assert mapped.release(tmp_path / "shard") == 0
    assert private[4096] == 7  # MADV_DONTNEED on it would have dropped what was written
    assert resident_kib(tmp_path / "other") >= SIZE // 1024
    private.close()
    elsewhere.close()


async def test_an_opened_shard_holds_none_of_its_write_ahead_log(tmp_path: Path) -> None:
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(points(2000, seed=3))
    await index.close()
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()  # reads the log to its end
    try:
        wal = sorted((index.path / "wal").iterdir())
        assert wal
        assert sum(resident_kib(p) for p in wal) == 0
        assert index._points == 2000
    finally:
        await index.close()


def resident_kib_under(directory: Path) -> int:
    """This process's resident KiB of its mappings of files under `directory`."""
    prefix = str(directory.resolve()) + "/"
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = prefix in line
        elif current and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


async def test_an_import_leaves_at_most_a_few_thousand_points_of_the_shard_resident(
    tmp_path: Path,
) -> None:
    """The pages an import writes (the log, the appendable segment's vectors, the payloads)
    are let go every `RELEASE_AFTER_POINTS` points: before, they stayed resident until the
    next graph build's swap (~200 MiB over 20k points at 100k memories)."""
    written = points(3 * 4096 + 512, seed=6)
    assert RELEASE_AFTER_POINTS == 4096
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    for start in range(0, len(written), 512):
        await index.upsert(written[start : start + 512])
    # What is resident now: the 512 points since the last release and what the next write
    # reads, not the 12k points before them (~40 MiB).
    assert resident_kib_under(index.path) < 12 << 10
    hit = await index.candidates(
        VectorQuery("t", "u", written[5].dense, terms.query_vector("note"), 3)
    )
    assert hit.dense[0].id == written[5].id  # what was written and let go reads back
    await index.close()


async def test_the_writes_replayed_onto_a_built_copy_are_let_go_as_the_live_shards_are(
    tmp_path: Path,
) -> None:
    """The writes made during a build are replayed onto the built copy before the swap
    (`_swap_in`), and what they write is let go every `RELEASE_AFTER_POINTS` points, as on
    the live shard: before, the whole journal's pages (~100 MiB for the 20k points an
    import wrote during a build at 100k) were resident at the swap."""
    index = QdrantEdgeIndex(tmp_path, "c", DIM)
    await index.ensure_collection()
    await index.upsert(points(512, seed=8))
    written = points(3 * 4096 + 512, seed=9)
    copied, journaled = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    copy_live, run_child = index._copy_live, index._run_child

    def copy_then_tell(source: Path) -> tuple[int, int]:
        taken = copy_live(source)
        loop.call_soon_threadsafe(copied.set)  # the writes from now on are journaled
        return taken

    async def child_then_writes(*args: Any, **kwargs: Any) -> None:
        await run_child(*args, **kwargs)
        await journaled.wait()  # every write below is in the journal, replayed at the swap

    index._copy_live = copy_then_tell  # type: ignore[method-assign]
    index._run_child = child_then_writes  # type: ignore[method-assign]
    build = asyncio.create_task(index.build_now())
    await copied.wait()
    for start in range(0, len(written), 512):
        await index.upsert(written[start : start + 512])
    journaled.set()
    await build
    try:
        assert index.builds == 1
        assert resident_kib_under(index.path) < 12 << 10
        hit = await index.candidates(
            VectorQuery("t", "u", written[7].dense, terms.query_vector("note"), 3)
        )
        assert hit.dense[0].id == written[7].id
    finally:
        await index.close()
