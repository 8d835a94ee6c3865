"""The C heap's settings and when the worker trims it (`app.malloc`)."""

from __future__ import annotations

import gc
import platform
import weakref

import pytest

from app import malloc
from app.malloc import Trimmer

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt and malloc_trim are glibc's"
)


def test_no_trim_before_enough_messages_were_promoted() -> None:
    t = Trimmer(after_messages=1000, min_seconds=5)
    t.promoted(999)
    assert not t.due(now=100.0)
    t.promoted(1)
    assert t.due(now=100.0)


def test_a_trim_resets_the_count_and_waits_its_interval() -> None:
    t = Trimmer(after_messages=10, min_seconds=5)
    t.promoted(10)
    assert t.idle(now=100.0)
    assert (t.pending, t.trims) == (0, 1)
    t.promoted(50)
    assert not t.idle(now=103.0)  # too soon after the last one
    assert t.idle(now=105.0)
    assert t.trims == 2


def test_zero_never_trims() -> None:
    t = Trimmer(after_messages=0)
    t.promoted(10**6)
    assert not t.idle(now=10**6)


@glibc
def test_glibc_takes_the_settings() -> None:
    assert malloc.tune_malloc(arena_max=2, mmap_threshold=262_144)
    assert malloc.tune_malloc(arena_max=0, mmap_threshold=0)  # nothing to set: still fine
    assert isinstance(malloc.trim(), bool)


class _Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_frozen_cycle_outlives_collections_until_unfrozen() -> None:
    node = _Node()
    alive = weakref.ref(node)
    before = gc.get_freeze_count()
    try:
        assert malloc.freeze_long_lived(collect=False) > before
        del node
        gc.collect()
        assert alive() is not None  # frozen: no collection walks it
    finally:
        gc.unfreeze()
    gc.collect()
    assert alive() is None
