"""A one-shot result that a background service fills in and a waiter blocks on (threads) or
subscribes to (asyncio, via a callback that uses call_soon_threadsafe).

Built on a bare lock held until completion rather than threading.Event: the group commit
creates one per put and wakes it from the flush thread, and Event's Condition machinery costs
several extra futex calls and GIL handoffs per wake-up.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Completion(Generic[T]):
    """One result, set once (the module docstring): owns the value, the done flag, the
    callbacks to run on completion and the deadline a service times it out by.

    `_gate`, held from construction until `complete`, is what `wait` blocks on (each waiter
    releases it again for the next). `_cb_lock`, made by the first `add_callback`, guards
    `_callbacks` and the done transition against registration. Until a callback exists,
    `complete` takes no lock: it relies on one completing thread, and a callback added
    while that unlocked `complete` runs in another thread is not guarded."""

    __slots__ = ("_gate", "_value", "_done", "_callbacks", "_cb_lock", "deadline")

    def __init__(self, deadline: float = 0.0) -> None:
        self._gate = threading.Lock()
        self._gate.acquire()  # released once, by complete()
        self._value: T | None = None
        self._done = False
        self._callbacks: list[Callable[[T], None]] | None = None
        self._cb_lock: threading.Lock | None = None  # made only if a callback is registered
        self.deadline = deadline  # monotonic seconds after which a service times it out

    def complete(self, value: T) -> bool:
        """Set the value once; later calls are ignored. Returns True if this call set it."""
        if self._done:
            return False
        cb_lock = self._cb_lock
        if cb_lock is not None:
            with cb_lock:
                if self._done:
                    return False
                self._value = value
                self._done = True
                callbacks, self._callbacks = self._callbacks, None
        else:
            self._value = value
            self._done = True
            callbacks = None
        self._gate.release()
        if callbacks:
            for cb in callbacks:
                cb(value)
        return True

    @property
    def done(self) -> bool:
        return self._done

    @property
    def value(self) -> T | None:
        return self._value

    def wait(self, timeout: float | None = None) -> T | None:
        if self._done:
            return self._value
        if self._gate.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._gate.release()  # let any other waiter through as well
        return self._value

    def add_callback(self, cb: Callable[[T], None]) -> None:
        """Run cb(value) on completion (in the completing thread), or now if already done."""
        if self._cb_lock is None:
            self._cb_lock = threading.Lock()
        with self._cb_lock:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(cb)
                return
        cb(self._value)  # type: ignore[arg-type]

    async def wait_async(self, timeout: float) -> T | None:
        """wait() for a coroutine on an event loop: the value, or None after `timeout` seconds.
        The completing thread hands the value to the loop (call_soon_threadsafe), or sets it
        directly when it is the loop's own thread (a slave's ack read on the loop)."""
        if self._done:
            return self._value
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        future: asyncio.Future = loop.create_future()

        def settle(value: T | None) -> None:
            if not future.done():
                future.set_result(value)

        def completed(value: T) -> None:
            if threading.get_ident() == loop_thread:
                settle(value)
                return
            try:
                loop.call_soon_threadsafe(settle, value)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        timer = loop.call_later(timeout, settle, None)
        self.add_callback(completed)
        try:
            return await future
        finally:
            timer.cancel()
