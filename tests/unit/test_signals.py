"""The wake-ups of waiting requests carry the watermark the worker committed."""

from __future__ import annotations

import asyncio

from app.stores.buffer import URGENT_WAKE, Breaker
from app.stores.signals import Signals


def signals() -> Signals:
    return Signals(None, Breaker(retry_seconds=5))


async def test_a_watch_keeps_the_highest_watermark_signalled() -> None:
    hub = signals()
    with (
        hub.watch("t", "u", "s") as watch,
        hub.watch("t", "u", "other") as other,
        hub.watch("t", "v", "s") as theirs,
    ):
        await hub.indexed("t", "u", "s", 20)
        await hub.indexed("t", "u", "s", 10)  # an older advance, heard late
        await asyncio.wait_for(watch.wait(1), 1)
        assert watch.seq == 20
        assert other.seq == 0  # another session's advance is not this one's
        assert theirs.seq == 0  # nor another user's session of the same id


async def test_an_advance_from_another_process_carries_its_seq() -> None:
    hub = signals()
    with hub.watch("t:x", "u/1", "s") as watch:
        hub._dispatch(hub.indexed_channel.encode(), b"t:x/u%2F1/s/42")
        hub._dispatch(hub.indexed_channel, "t:x/u%2F1/s/not-a-number")  # ignored
        hub._dispatch(hub.indexed_channel, "t:x/u/1/s/43")  # another user's: ignored
        assert watch.seq == 42


async def test_closing_passes_on_a_cancellation_while_the_listener_winds_down() -> None:
    hub = signals()

    async def slow_to_stop() -> None:  # a listener whose clean-up waits on a slow connection
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(2)
            raise

    hub._task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    closing = asyncio.create_task(hub.close())
    await asyncio.sleep(0.05)  # close() now waits for the listener
    closing.cancel()
    try:
        await closing
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("close() swallowed its caller's cancellation")
    finally:
        await asyncio.wait({hub._task or closing}, timeout=5)  # leave no task behind


async def test_a_wake_up_from_a_waiting_request_is_urgent_and_others_are_not() -> None:
    """Another process's ingest wakes the workers (b"1"); one whose request waits for the
    index also ends a worker's pause to gather a trickle (b"2:" and its tag). This
    process's own urgent wake-up, heard back over Redis, is not urgent again: its flag was
    set directly, and the echo would end the next pause for nothing."""
    hub = signals()
    hub._dispatch(hub.wake_channel.encode(), b"1")
    assert hub.work.is_set()
    assert not hub.urgent.is_set()
    hub.work.clear()
    hub._dispatch(hub.wake_channel, "2:0123456789ab")  # another process's
    assert hub.work.is_set()
    assert hub.urgent.is_set()
    hub.urgent.clear()
    hub._dispatch(hub.wake_channel.encode(), URGENT_WAKE)  # our own, echoed
    assert not hub.urgent.is_set()
    await hub.hurry()  # this process's own waiting request
    assert hub.urgent.is_set()
    hub.urgent.clear()
    hub.work_arrived()
    assert not hub.urgent.is_set()
