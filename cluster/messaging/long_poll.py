"""Long polling: answer when there is something, or when the wait is over. One implementation
for PullMessage (pull_reader.py) and ReceiveMessage (cluster/consume/consumer_calls.py).

    long_poll(attempt, wait_s=..., waiter=..., clock=..., budget=..., time_remaining=...)

calls `attempt()` until it says done, waiting between attempts for the next dispatch by reput
(`DispatchWaiter`, a store reput listener) or for the attempt's own wake time (ReceiveMessage:
the next invisibility expiry). It stops and returns the last attempt's value when

- `wait_s` of the injected clock's time passed (tests advance a ManualClock instead of
  sleeping: Clock.wait_for ends by the clock's own time), or
- the call's gRPC deadline is near (`time_remaining`, real seconds; ANSWER_MARGIN_S is left to
  send the answer), or
- no thread is left in the stream budget to hold (too many long polls: answer now).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

if TYPE_CHECKING:
    from store.clock import Clock

    from cluster.messaging.telemetry import StreamBudget

T = TypeVar("T")
ANSWER_MARGIN_S = 0.2
MIN_WAIT_S = 0.01


class DispatchWaiter:
    """Wakes long polls when reput dispatched something (a store reput listener). `_cond`
    guards `_generation`, which counts dispatch rounds."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def on_dispatched(self, _requests) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    @property
    def generation(self) -> int:
        return self._generation

    def wait(self, seen: int, timeout_s: float, clock: "Clock",
             real_limit_s: float | None = None) -> None:
        """Until a dispatch round after `seen`, `timeout_s` of `clock`'s time, or
        `real_limit_s` real seconds."""
        with self._cond:
            clock.wait_for(self._cond, lambda: self._generation != seen, timeout_s, real_limit_s)


@dataclass(frozen=True)
class Attempt(Generic[T]):
    value: T
    done: bool
    wake_in_s: float | None = None  # try again no later than this, even without a dispatch


def long_poll(attempt: Callable[[], Attempt[T]], *, wait_s: float, waiter: DispatchWaiter,
              clock: "Clock", budget: "StreamBudget | None",
              time_remaining: Callable[[], float | None] = lambda: None) -> T:
    deadline = clock.monotonic() + wait_s
    holding = False
    try:
        while True:
            seen = waiter.generation  # before the attempt: a dispatch during it wakes us
            result = attempt()
            if result.done:
                return result.value
            left = deadline - clock.monotonic()
            call_left = time_remaining()  # real seconds
            real_limit = None if call_left is None else call_left - ANSWER_MARGIN_S
            if left <= 0 or (real_limit is not None and real_limit <= 0):
                return result.value
            if not holding:
                if budget is not None and not budget.try_acquire():
                    return result.value
                holding = True
            if result.wake_in_s is not None:
                left = min(left, max(MIN_WAIT_S, result.wake_in_s))
            waiter.wait(seen, left, clock, real_limit)
    finally:
        if holding and budget is not None:
            budget.release()
