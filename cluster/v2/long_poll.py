"""Long polling: answer when there is something, or when the wait is over. One implementation
for PullMessage (cluster/messaging/pull_reader.py) and ReceiveMessage
(cluster/consume/consumer_calls.py).

    long_poll(attempt, wait_s=..., waiter=..., clock=..., budget=..., time_remaining=...)
    await long_poll_async(attempt, ...)      # on the server's event loop
                                             # (cluster/serving/grpc_server.py)

Both drive one decision generator (`poll_steps`), which yields each wait it wants (`Wait`) and
returns the answer: the blocking driver waits on the waiter's condition in the calling thread,
the async one awaits a future the reput thread resolves through the loop, so a waiting
ReceiveMessage holds no thread. `poll_steps` calls `attempt()` until it says done, waiting between attempts for the next dispatch by reput
(`DispatchWaiter`, a store reput listener) or for the attempt's own wake time (ReceiveMessage:
the next invisibility expiry). It stops and returns the last attempt's value when

- `wait_s` of the injected clock's time passed (tests advance a ManualClock instead of
  sleeping: Clock.wait_for ends by the clock's own time), or
- the call's gRPC deadline is near (`time_remaining`, real seconds; ANSWER_MARGIN_S is left to
  send the answer), or
- no room is left in the budget of held calls (too many long polls: answer now). The blocking
  driver counts against the threads' StreamBudget, the async one against a much larger one.

Both wait by the injected clock (`Clock.wait_for`, `Clock.wait_async`): a test advancing a
ManualClock ends either kind of wait.
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generator, Generic, TypeVar

if TYPE_CHECKING:
    from common.clock import Clock

    from cluster.messaging.telemetry import StreamBudget

T = TypeVar("T")
ANSWER_MARGIN_S = 0.2
MIN_WAIT_S = 0.01


@dataclass(frozen=True)
class Interest:
    """What an async long poll waits for: messages of `topic` whose tag code is in `codes`
    (None: any tag), for consumer `group` (every group consumes every message: each is woken
    on its own), taking up to `batch` messages per answer."""
    topic: str
    group: str = ""
    codes: frozenset[int] | None = None
    batch: int = 1


class _AsyncWaiter:
    __slots__ = ("loop", "future", "codes", "batch")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future,
                 interest: Interest) -> None:
        self.loop, self.future = loop, future
        self.codes, self.batch = interest.codes, max(1, interest.batch)


class DispatchWaiter:
    """Wakes long polls when reput dispatched something (a store reput listener). `_cond`
    guards `_generation`, which counts dispatch rounds, and `_by_topic`, the async waiters per
    topic, oldest first.

    Threads (the blocking driver) wake on every round. Async waiters wake only for their
    topic, and per consumer group only as many per round as can take the messages the round
    brought (by their batch sizes and tags): with 2,000 consumers of one group waiting, one
    message wakes one of them (the oldest), not all (RocketMQ's pop long polling does the
    same), and 128 messages wake 8 consumers receiving 16 at a time. A woken consumer that finds
    nothing waits again. `poke` wakes one waiter of a group when its own deliveries become
    visible again (a nack), which no dispatch announces."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._by_topic: dict[str, dict[str, deque[_AsyncWaiter]]] = {}

    def on_dispatched(self, requests) -> None:
        woken: list[_AsyncWaiter] = []
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
            if self._by_topic:
                arrived: dict[str, list[int]] = {}
                for r in requests:
                    if r.topic in self._by_topic:
                        arrived.setdefault(r.topic, []).append(r.tags_code)
                for topic, codes in arrived.items():
                    for group in list(self._by_topic.get(topic, ())):
                        woken += self._take(topic, group, codes)
        _wake(woken)

    def poke(self, topic: str, group: str) -> None:
        """Wake one async waiter of `group` on `topic`, whatever its tags."""
        with self._cond:
            woken = self._take(topic, group, None) if group in self._by_topic.get(topic, ()) \
                else []
        _wake(woken)

    def _take(self, topic: str, group: str, codes: list[int] | None) -> list[_AsyncWaiter]:
        """The oldest waiters of `group` on `topic` that can take the messages with these tag
        `codes` between them (codes None: the oldest one). Called with _cond held."""
        groups = self._by_topic[topic]
        waiters = groups[group]
        present = None if codes is None else set(codes)
        left = 1 if codes is None else len(codes)  # messages not yet promised to a waiter
        taken: list[_AsyncWaiter] = []
        kept: deque[_AsyncWaiter] = deque()
        while waiters and left > 0:
            w = waiters.popleft()
            if present is None or w.codes is None:
                left -= w.batch
            elif not w.codes.isdisjoint(present):
                left -= min(w.batch, sum(1 for c in codes if c in w.codes))
            else:
                kept.append(w)
                continue
            taken.append(w)
        kept.extend(waiters)
        if kept:
            groups[group] = kept
        else:
            del groups[group]
            if not groups:
                del self._by_topic[topic]
        return taken

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def async_waiting(self) -> int:
        return sum(len(q) for groups in self._by_topic.values() for q in groups.values())

    def wait(self, seen: int, timeout_s: float, clock: "Clock",
             real_limit_s: float | None = None) -> None:
        """Until a dispatch round after `seen`, `timeout_s` of `clock`'s time, or
        `real_limit_s` real seconds."""
        with self._cond:
            clock.wait_for(self._cond, lambda: self._generation != seen, timeout_s, real_limit_s)

    async def wait_async(self, seen: int, timeout_s: float, interest: Interest, clock: "Clock",
                         real_limit_s: float | None = None) -> None:
        """On an event loop: until a dispatch round after `seen` brought `interest` a message
        (only the first check is against any round: one may have passed since `seen`),
        `timeout_s` of `clock`'s time, or `real_limit_s` real seconds."""
        loop = asyncio.get_running_loop()
        waiter = _AsyncWaiter(loop, loop.create_future(), interest)
        with self._cond:
            if self._generation != seen:
                return
            self._by_topic.setdefault(interest.topic, {}).setdefault(
                interest.group, deque()).append(waiter)
        try:
            await clock.wait_async(waiter.future, timeout_s, real_limit_s)
        finally:
            if not waiter.future.done():  # timed out or cancelled: leave the queue
                with self._cond:
                    self._forget(interest, waiter)

    def _forget(self, interest: Interest, waiter: _AsyncWaiter) -> None:
        groups = self._by_topic.get(interest.topic, {})
        waiters = groups.get(interest.group)
        if waiters is None:
            return
        try:
            waiters.remove(waiter)
        except ValueError:
            return
        if not waiters:
            del groups[interest.group]
            if not groups:
                del self._by_topic[interest.topic]


def _wake(woken: list[_AsyncWaiter]) -> None:
    for w in woken:
        w.loop.call_soon_threadsafe(_resolve, w.future)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True)
class Attempt(Generic[T]):
    value: T
    done: bool
    wake_in_s: float | None = None  # try again no later than this, even without a dispatch


@dataclass(frozen=True)
class Wait:
    """What poll_steps asks its driver: wait for a dispatch after `seen`, at most `timeout_s`
    of the clock's time and `real_limit_s` real seconds (None: no call deadline)."""
    seen: int
    timeout_s: float
    real_limit_s: float | None


ATTEMPT = None  # what poll_steps yields when it wants an attempt's result sent in


def poll_steps(*, wait_s: float, waiter: DispatchWaiter, clock: "Clock",
               budget: "StreamBudget | None",
               time_remaining: Callable[[], float | None] = lambda: None
               ) -> Generator["Wait | None", "Attempt[T] | None", T]:
    """The decisions of one long poll (see the module doc), without I/O: yields ATTEMPT (the
    driver sends back an attempt's result) or a Wait (the driver sends None once it waited);
    returns the answer."""
    deadline = clock.monotonic() + wait_s
    holding = False
    try:
        while True:
            seen = waiter.generation  # before the attempt: a dispatch during it wakes us
            result = yield ATTEMPT
            assert result is not None, "send the attempt's result"
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
            yield Wait(seen, left, real_limit)
    finally:
        if holding and budget is not None:
            budget.release()


def long_poll(attempt: Callable[[], Attempt[T]], *, wait_s: float, waiter: DispatchWaiter,
              clock: "Clock", budget: "StreamBudget | None",
              time_remaining: Callable[[], float | None] = lambda: None) -> T:
    steps = poll_steps(wait_s=wait_s, waiter=waiter, clock=clock, budget=budget,
                       time_remaining=time_remaining)
    try:
        step = next(steps)
        while True:
            if step is ATTEMPT:
                step = steps.send(attempt())
            else:
                waiter.wait(step.seen, step.timeout_s, clock, step.real_limit_s)
                step = steps.send(None)
    except StopIteration as done:
        return done.value
    finally:
        steps.close()


async def long_poll_async(attempt: Callable[[], Attempt[T]], interest: Interest, *,
                          wait_s: float, waiter: DispatchWaiter, clock: "Clock",
                          budget: "StreamBudget | None", attempt_inline: bool = True,
                          time_remaining: Callable[[], float | None] = lambda: None) -> T:
    """long_poll on an event loop: the waits hold no thread; the attempts run on the loop, or
    in the thread pool when the caller says so (`attempt_inline` False: a SYNC_FLUSH node
    keeps its consumer-state appends off the loop)."""
    steps = poll_steps(wait_s=wait_s, waiter=waiter, clock=clock, budget=budget,
                       time_remaining=time_remaining)
    try:
        step = next(steps)
        while True:
            if step is ATTEMPT:
                result = attempt() if attempt_inline else await asyncio.to_thread(attempt)
                step = steps.send(result)
            else:
                await waiter.wait_async(step.seen, step.timeout_s, interest, clock,
                                        step.real_limit_s)
                step = steps.send(None)
    except StopIteration as done:
        return done.value
    finally:
        steps.close()
