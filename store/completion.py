"""A one-shot result that a background service fills in and a waiter blocks on (threads) or
subscribes to (asyncio, via a callback that uses call_soon_threadsafe)."""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Completion(Generic[T]):
    __slots__ = ("_event", "_value", "_callbacks", "_lock", "deadline")

    def __init__(self, deadline: float = 0.0) -> None:
        self._event = threading.Event()
        self._value: T | None = None
        self._callbacks: list[Callable[[T], None]] = []
        self._lock = threading.Lock()
        self.deadline = deadline  # monotonic seconds after which a service times it out

    def complete(self, value: T) -> bool:
        """Set the value once; later calls are ignored. Returns True if this call set it."""
        with self._lock:
            if self._event.is_set():
                return False
            self._value = value
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(value)
        return True

    @property
    def done(self) -> bool:
        return self._event.is_set()

    @property
    def value(self) -> T | None:
        return self._value

    def wait(self, timeout: float | None = None) -> T | None:
        self._event.wait(timeout)
        return self._value

    def add_callback(self, cb: Callable[[T], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        cb(self._value)  # type: ignore[arg-type]
