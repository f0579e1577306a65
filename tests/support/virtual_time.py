"""An asyncio event loop on a virtual clock, for tests of deadlines and timeouts.

icegov's backing transport and forwarder measure every timeout and deadline on the event loop's
clock (``loop.time()``: ``asyncio.timeout``, ``call_later``), so that clock is their seam. The
loop here starts its clock at 0 and moves it only when the loop would otherwise wait: when no
socket is ready and no callback is due, it jumps straight to the next timer instead of sleeping.
Real sockets still carry the bytes (on loopback a write is in the peer's buffer at once), so a
test whose peers all run in this loop sees exactly the timers' order, never the machine's speed,
and takes no wall-clock time waiting.

A callback that runs in a thread (``run_in_executor``) can make a socket ready later without a
timer; while one is in flight the loop waits for real, so time never jumps past its answer.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that, finding nothing ready, advances ``loop``'s clock by the timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        loop = self.loop
        if ready or timeout == 0 or loop is None:
            return ready
        if timeout is None or loop.threads_in_flight:
            return list(super().select(timeout))  # only a socket or a thread can wake it
        loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual (see the module docstring)."""

    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0
        self.threads_in_flight = 0

    def time(self) -> float:
        return self.now

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T],
                        *args: *Ts) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.threads_in_flight += 1

        def done(_: asyncio.Future[T]) -> None:
            self.threads_in_flight -= 1
        future.add_done_callback(done)
        return future


def run_in_virtual_time(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh ``VirtualTimeLoop``."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
