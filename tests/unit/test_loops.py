"""The lock and the wake-up two event loops of one process share (app/stores/loops.py):
taken in turn across loops, handed over to a waiter of the other loop, never held by a
waiter that gave up; a wake-up set from another thread wakes the waiting loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest

from app.stores.buffer import Breaker
from app.stores.loops import TurnLock, Wakeup
from app.stores.signals import Signals

T = TypeVar("T")


class _Other:
    """An event loop on a thread of its own, as the worker's."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """`make()` run on the other loop, awaited from this one."""

        async def there() -> T:
            return await make()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(there(), self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def backstop(seconds: float) -> Iterator[list[str]]:
    """Wakes this loop after `seconds` from another thread, and says so in the list it
    yields: a waiter still asleep by then was not woken by what the test did (its wake-up
    never reached this loop's selector), and sees the mark when it finally runs. An order,
    not a measure: the wake-up under test takes a fraction of a second."""
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    timer = threading.Timer(seconds, lambda: loop.call_soon_threadsafe(fired.append, "fired"))
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


@contextmanager
def other_loop() -> Iterator[_Other]:
    other = _Other()
    try:
        yield other
    finally:
        other.close()


async def test_a_waiter_on_another_loop_gets_the_lock_when_it_is_let_go() -> None:
    lock = TurnLock()
    order: list[str] = []
    with other_loop() as other:
        await lock.acquire()

        async def theirs() -> None:
            async with lock:
                order.append("theirs")

        waiting = asyncio.ensure_future(other.run(theirs))
        for _ in range(200):  # until their turn is queued behind ours
            if lock._waiters:
                break
            await asyncio.sleep(0.01)
        assert lock._waiters
        order.append("mine")
        lock.release()
        await waiting
    assert order == ["mine", "theirs"]
    assert not lock.locked()


async def test_two_loops_never_hold_it_together() -> None:
    lock = TurnLock()
    inside = 0
    most = 0
    guard = threading.Lock()

    async def hold(n: int) -> None:
        nonlocal inside, most
        for _ in range(n):
            async with lock:
                with guard:
                    inside += 1
                    most = max(most, inside)
                await asyncio.sleep(0)
                with guard:
                    inside -= 1

    with other_loop() as other:
        await asyncio.gather(hold(300), other.run(lambda: hold(300)), hold(300))
    assert most == 1
    assert not lock.locked()


async def test_turns_go_in_the_order_asked_across_loops() -> None:
    lock = TurnLock()
    order: list[int] = []
    with other_loop() as other:
        await lock.acquire()
        waiting = []
        for n in range(4):

            async def take(n: int = n) -> None:
                async with lock:
                    order.append(n)

            # Even turns wait here, odd ones on the other loop; each queued before the next.
            waiting.append(asyncio.ensure_future(other.run(take) if n % 2 else take()))
            for _ in range(200):
                if len(lock._waiters) == n + 1:
                    break
                await asyncio.sleep(0.01)
            assert len(lock._waiters) == n + 1
        lock.release()
        await asyncio.gather(*waiting)
    assert order == [0, 1, 2, 3]


@pytest.mark.parametrize("where", ["here", "there"])
async def test_a_waiter_that_gives_up_passes_its_turn_on(where: str) -> None:
    lock = TurnLock()
    with other_loop() as other:
        await lock.acquire()

        async def give_up() -> None:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await lock.acquire()

        async def then_take() -> str:
            async with lock:
                return "taken"

        if where == "here":
            await give_up()
        else:
            await other.run(give_up)
        assert not lock._waiters
        taker = asyncio.ensure_future(other.run(then_take))
        for _ in range(200):
            if lock._waiters:
                break
            await asyncio.sleep(0.01)
        lock.release()
        assert await taker == "taken"
    assert not lock.locked()


async def test_a_turn_granted_to_a_cancelled_waiter_is_passed_on() -> None:
    """Handed over, then cancelled before it ran: the next waiter gets the lock."""
    lock = TurnLock()
    await lock.acquire()
    first = asyncio.ensure_future(lock.acquire())
    second = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0)
    lock.release()  # granted to `first`, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5)
    assert lock.locked()
    lock.release()
    assert not lock.locked()


def test_releasing_a_lock_not_held_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        TurnLock().release()


async def test_a_wakeup_set_from_another_thread_wakes_the_waiting_loop() -> None:
    wakeup = Wakeup()
    wakeup.clear()  # bound to this loop, as the worker's pass does
    waiter = asyncio.ensure_future(wakeup.wait())

    def later() -> None:
        time.sleep(0.2)  # this loop is asleep in its selector by then
        wakeup.set()

    setter = threading.Thread(target=later)
    with backstop(30) as fired:
        setter.start()
        await waiter
        assert not fired  # woken by the set, not by the backstop
    setter.join()
    assert wakeup.is_set()


async def test_an_advance_from_the_workers_thread_wakes_a_waiting_request() -> None:
    signals = Signals(None, Breaker(1.0))
    with signals.watch("t", "u", "s") as watch, other_loop() as worker:

        async def advance() -> None:
            await asyncio.sleep(0.2)  # this loop is asleep in its selector by then
            await signals.indexed("t", "u", "s", 5)

        with backstop(30) as fired:
            # Not awaited through this loop, which nothing but the advance may wake.
            advancing = asyncio.run_coroutine_threadsafe(advance(), worker.loop)
            await watch.wait(3600)  # an hour, ended by the advance
            assert not fired
        advancing.result(10)
        assert watch.seq == 5
