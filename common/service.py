"""Background services: one thread each, a `step()` that does one round of work, and a wait
between rounds that a `wakeup()` cuts short. Tests call `step()` directly with a ManualClock."""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Service:
    """A background service: one daemon thread running `step()` rounds, `wait_interval()`
    seconds apart unless `wakeup()` cuts the wait short; `stop()` ends the loop, joins the
    thread and calls `on_stop()`. Owns the thread and two Events (`_stopping`, `_wake`),
    which are its only synchronisation: a subclass guards its own state, and `step()` may
    also be called directly (tests, an admin's flush), so it must expect callers besides
    its thread."""

    name = "service"

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()

    def step(self) -> None:
        """One round of work; must not block for long."""
        raise NotImplementedError

    def wait_interval(self) -> float:
        """Seconds to wait between rounds (woken early by wakeup())."""
        return 0.1

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        if not self._wake.is_set():  # set() takes a condition lock: skip when already awake
            self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.on_stop()

    def on_stop(self) -> None:
        """Final work after the loop ended (e.g. a last flush)."""

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stopping.is_set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.step()
            except Exception:  # a service must not die silently; the step records the failure
                log.exception("%s step failed", self.name)
            self._wake.wait(self.wait_interval())
            self._wake.clear()


class PeriodicTask(Service):
    """A service whose round is one callable, every `interval_s` seconds (health checks,
    housekeeping): no subclass needed for a single function."""

    def __init__(self, name: str, round_fn: Callable[[], object], interval_s: float) -> None:
        super().__init__()
        self.name = name
        self._round = round_fn
        self._interval_s = interval_s

    def step(self) -> None:
        self._round()

    def wait_interval(self) -> float:
        return self._interval_s
