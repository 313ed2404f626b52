"""Injectable time sources, so background services can be stepped in tests without sleeping."""
from __future__ import annotations

import threading
import time


class Clock:
    """Wall-clock milliseconds (timestamps written to disk) and monotonic seconds (timeouts)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = Clock()


class ManualClock(Clock):
    """A clock that only moves when told to. Both views advance together."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = start_ms
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ms += int(round(seconds * 1000))
            self._mono += seconds

    def set_ms(self, ms: int) -> None:
        with self._lock:
            self._mono += max(0, ms - self._ms) / 1000.0
            self._ms = ms
