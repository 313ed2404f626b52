"""Injectable time sources, so background services can be stepped in tests without sleeping,
and waits that end by the clock's own time (a long poll on a ManualClock ends when the test
advances the clock, not after real seconds)."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


class Clock:
    """Wall-clock milliseconds (timestamps written to disk) and monotonic seconds (timeouts)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    async def wait_async(self, future: "asyncio.Future", timeout_s: float,
                         real_limit_s: float | None = None) -> None:
        """On an event loop: until `future` is done, `timeout_s` of this clock's time, or
        `real_limit_s` real seconds (a deadline outside the process, e.g. a gRPC call's, caps the wait). The future is never cancelled here."""
        import asyncio  # here: a process that never waits on a loop (the index process, the
        # store tool) does not pay for importing it
        if real_limit_s is not None:
            timeout_s = min(timeout_s, real_limit_s)
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, timeout_s))
        except asyncio.TimeoutError:
            pass


SYSTEM_CLOCK = Clock()


class ManualClock(Clock):
    """A clock that only moves when told to. Both views advance together."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = start_ms
        self._mono = 1000.0
        self._lock = threading.Lock()
        self._waits = 0  # wait_async calls registered right now

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    @property
    def waiters(self) -> int:
        """How many wait_async calls are registered now: a test advances the clock once a long
        poll sits in its wait (an advance before it registered would not end that wait)."""
        with self._lock:
            return self._waits

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ms += int(round(seconds * 1000))
            self._mono += seconds

    def set_ms(self, ms: int) -> None:
        with self._lock:
            self._mono += max(0, ms - self._ms) / 1000.0
            self._ms = ms

    async def wait_async(self, future: "asyncio.Future", timeout_s: float,
                         real_limit_s: float | None = None) -> None:
        """Like Clock.wait_async, with `timeout_s` in this clock's time (re-checked every
        50 ms of real time, and counted in `waiters`)."""
        import asyncio  # see Clock.wait_async
        deadline = self.monotonic() + timeout_s
        real_deadline = None if real_limit_s is None else time.monotonic() + real_limit_s
        with self._lock:
            self._waits += 1
        try:
            while not future.done():
                if self.monotonic() >= deadline or (
                        real_deadline is not None and time.monotonic() >= real_deadline):
                    return
                try:
                    await asyncio.wait_for(asyncio.shield(future), 0.05)
                except asyncio.TimeoutError:
                    pass
        finally:
            with self._lock:
                self._waits -= 1
