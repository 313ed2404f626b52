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
    """One value, set once by whichever thread produces it (`complete`), and the waits for it.
    It is the one bridge between a thread that completes and a waiter of either execution
    model, so it keeps exactly one way to wait for each: `wait` blocks a thread, `wait_async`
    is awaited on an event loop. Neither decides what is waited for (whoever made the
    Completion did) nor holds anything beyond the wait itself; both answer the value, or None
    once their timeout passed.

    `_lock` guards `_done`, `_value` and `_callbacks`: complete() sets the value and takes the
    callbacks in one hold of it, so two complete() calls cannot both win and a callback added
    meanwhile is run exactly once (by complete(), or by add_callback when it comes after).
    `_gate`, held from creation until complete() releases it, is what a blocked wait() sleeps
    on. `deadline` is for the service that completes it (a time-out after its deadline)."""

    __slots__ = ("_gate", "_lock", "_value", "_done", "_callbacks", "deadline")

    def __init__(self, deadline: float = 0.0) -> None:
        self._gate = threading.Lock()
        self._gate.acquire()  # released once, by complete()
        self._lock = threading.Lock()
        self._value: T | None = None
        self._done = False
        self._callbacks: list[Callable[[T], None]] | None = None
        self.deadline = deadline  # monotonic seconds after which a service times it out

    def complete(self, value: T) -> bool:
        """Set the value once; later calls are ignored. Returns True if this call set it."""
        if self._done:
            return False
        with self._lock:
            if self._done:
                return False
            self._value = value
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
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
        with self._lock:
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
