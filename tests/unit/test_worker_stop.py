"""`app.worker.finish`: a stopping worker gets a bounded grace, then is cancelled."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.worker import finish


async def test_a_worker_that_stops_in_time_is_left_to_finish() -> None:
    stop = asyncio.Event()
    finished: list[str] = []

    async def worker() -> None:
        await stop.wait()
        await asyncio.sleep(0.05)  # the pass in progress ends
        finished.append("pass")

    task = asyncio.create_task(worker())
    stop.set()
    await finish(task, grace=5)
    assert finished == ["pass"]
    assert not task.cancelled()


async def test_a_worker_stuck_in_a_call_is_cancelled_after_the_grace() -> None:
    cancelled: list[bool] = []

    async def worker() -> None:
        try:
            await asyncio.sleep(3600)  # a model call or a connection that never answers
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    started = time.monotonic()
    await finish(task, grace=0.2)
    assert task.cancelled()
    assert cancelled == [True]
    assert time.monotonic() - started < 30  # not the hour the call would have taken


async def test_what_the_worker_raised_is_raised() -> None:
    async def worker() -> None:
        raise RuntimeError("the store is gone")

    task = asyncio.create_task(worker())
    with pytest.raises(RuntimeError, match="the store is gone"):
        await finish(task, grace=1)


async def test_a_worker_that_ignores_its_cancellation_is_left_after_a_second_grace() -> None:
    release = asyncio.Event()

    async def worker() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # a badly behaved pass swallows the cancellation

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    await finish(task, grace=0.1)
    assert not task.done()
    release.set()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.done()
