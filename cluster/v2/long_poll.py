"""Long polling: answer when there is something, or when the wait is over. One implementation
for PullMessage (cluster/messaging/pull_reader.py) and ReceiveMessage
(cluster/consume/consumer_calls.py), both coroutines on the server's event loop:

    await long_poll(attempt, interest, wait_s=..., waiter=..., clock=..., budget=...,
                    time_remaining=...)

`long_poll` drives one decision generator (`poll_steps`, no I/O), which yields each wait it
wants (`Wait`) and returns the answer; the driver awaits a future that the reput thread
resolves through the loop, so a waiting call holds no thread. `poll_steps` calls `attempt()`
until it says done, waiting between attempts for the next dispatch by reput (`DispatchWaiter`,
a store reput listener) or for the attempt's own wake time (ReceiveMessage: the next
invisibility expiry). It stops and returns the last attempt's value when

- `wait_s` of the injected clock's time passed (tests advance a ManualClock instead of
  sleeping: Clock.wait_async ends by the clock's own time), or
- the call's gRPC deadline is near (`time_remaining`, real seconds; ANSWER_MARGIN_S is left to
  send the answer), or
- no room is left in the budget of held calls (too many long polls: answer now).
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
    """Wakes long polls when reput dispatched something (a store reput listener, called on
    reput's thread). `_lock` guards `_generation`, which counts dispatch rounds, and
    `_by_topic`, the waiters per topic, oldest first (they wait on the server's event loop;
    reput resolves their futures through it).

    Waiters wake only for their topic, and per consumer group only as many per round as can take the messages the round
    brought (by their batch sizes and tags): with 2,000 consumers of one group waiting, one
    message wakes one of them (the oldest), not all (RocketMQ's pop long polling does the
    same), and 128 messages wake 8 consumers receiving 16 at a time. A woken consumer that finds
    nothing waits again. `poke` wakes one waiter of a group when its own deliveries become
    visible again (a nack), which no dispatch announces."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._by_topic: dict[str, dict[str, deque[_AsyncWaiter]]] = {}

    def on_dispatched(self, requests) -> None:
        woken: list[_AsyncWaiter] = []
        with self._lock:
            self._generation += 1
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
        with self._lock:
            woken = self._take(topic, group, None) if group in self._by_topic.get(topic, ()) \
                else []
        _wake(woken)

    def _take(self, topic: str, group: str, codes: list[int] | None) -> list[_AsyncWaiter]:
        """The oldest waiters of `group` on `topic` that can take the messages with these tag
        `codes` between them (codes None: the oldest one). Called with _lock held."""
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

    async def wait(self, seen: int, timeout_s: float, interest: Interest, clock: "Clock",
                         real_limit_s: float | None = None) -> None:
        """Until a dispatch round after `seen` brought `interest` a message
        (only the first check is against any round: one may have passed since `seen`),
        `timeout_s` of `clock`'s time, or `real_limit_s` real seconds."""
        loop = asyncio.get_running_loop()
        waiter = _AsyncWaiter(loop, loop.create_future(), interest)
        with self._lock:
            if self._generation != seen:
                return
            self._by_topic.setdefault(interest.topic, {}).setdefault(
                interest.group, deque()).append(waiter)
        try:
            await clock.wait_async(waiter.future, timeout_s, real_limit_s)
        finally:
            if not waiter.future.done():  # timed out or cancelled: leave the queue
                with self._lock:
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


async def long_poll(attempt: Callable[[], Attempt[T]], interest: Interest, *,
                    wait_s: float, waiter: DispatchWaiter, clock: "Clock",
                    budget: "StreamBudget | None",
                    time_remaining: Callable[[], float | None] = lambda: None) -> T:
    """The long poll of one call on the event loop: the attempts run on the loop (they never
    block: they read and append, and what they append is not waited for here), the waits
    hold no thread."""
    steps = poll_steps(wait_s=wait_s, waiter=waiter, clock=clock, budget=budget,
                       time_remaining=time_remaining)
    try:
        step = next(steps)
        while True:
            if step is ATTEMPT:
                step = steps.send(attempt())
            else:
                await waiter.wait(step.seen, step.timeout_s, interest, clock, step.real_limit_s)
                step = steps.send(None)
    except StopIteration as done:
        return done.value
    finally:
        steps.close()
