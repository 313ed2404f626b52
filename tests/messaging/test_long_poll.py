"""The one long-poll loop, driven by a ManualClock and a DispatchWaiter in memory: no sleeps,
no node (each poll runs on an event loop of its own thread, as on the server's loop, while
the test plays reput and the clock from this one). Each wait ends by a dispatch, by the clock's own time, by the attempt's wake time, by
the call's real deadline, or not at all when the stream budget is spent. A test advances the
clock only once the poll sits in its wait (waiting_on): an advance before would be lost on it."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from concurrent.futures import wait

from cluster.v2.long_poll import Attempt, DispatchWaiter, Interest
from cluster.v2.long_poll import long_poll as long_poll_on_loop
from cluster.messaging.telemetry import StreamBudget
from common.clock import ManualClock
from tests.support.waiting import in_background, waiting_on


@dataclass(frozen=True)
class Arrival:  # the two fields of a DispatchRequest the waiter reads
    topic: str
    tags_code: int = 0


class Source:
    """Attempts that find nothing until `ready` is set; counts the attempts."""

    def __init__(self) -> None:
        self.ready = False
        self.attempts = 0
        self.wake_in_s: float | None = None

    def __call__(self) -> Attempt[str]:
        self.attempts += 1
        return Attempt("found" if self.ready else "nothing", self.ready, self.wake_in_s)


def long_poll(attempt, **kwargs):
    """The long poll on an event loop of the calling thread, to its answer."""
    return asyncio.run(long_poll_on_loop(attempt, Interest("T"), **kwargs))


def test_done_at_once_takes_no_budget():
    budget, source = StreamBudget(1), Source()
    source.ready = True
    assert long_poll(source, wait_s=5, waiter=DispatchWaiter(), clock=ManualClock(),
                     budget=budget) == "found"
    assert source.attempts == 1 and budget.open == 0


def test_a_dispatch_wakes_the_poll():
    waiter, clock, source, budget = DispatchWaiter(), ManualClock(), Source(), StreamBudget(1)
    poll = in_background(lambda: long_poll(source, wait_s=30, waiter=waiter, clock=clock,
                                           budget=budget))
    waiting_on(clock)
    assert budget.open == 1  # held while waiting
    source.ready = True
    waiter.on_dispatched([Arrival("T")])
    assert poll.result(timeout=5) == "found" and source.attempts == 2 and budget.open == 0


def test_the_wait_ends_by_the_clock_not_by_real_time():
    waiter, clock, source = DispatchWaiter(), ManualClock(), Source()
    poll = in_background(lambda: long_poll(source, wait_s=30, waiter=waiter, clock=clock,
                                           budget=None))
    waiting_on(clock)
    assert not wait([poll], timeout=0.2).done  # 0.2 real seconds are nothing to a manual clock
    clock.advance(29)
    assert not wait([poll], timeout=0.2).done
    clock.advance(1)
    assert poll.result(timeout=5) == "nothing"


def test_the_attempts_wake_time_brings_the_next_attempt():
    waiter, clock, source = DispatchWaiter(), ManualClock(), Source()
    source.wake_in_s = 2.0  # e.g. the next invisibility expiry

    def becomes_ready_after_two_seconds():
        source.ready = clock.monotonic() >= start + 2
        return Source.__call__(source)

    start = clock.monotonic()
    poll = in_background(lambda: long_poll(becomes_ready_after_two_seconds, wait_s=30,
                                           waiter=waiter, clock=clock, budget=None))
    waiting_on(clock)
    clock.advance(2)
    assert poll.result(timeout=5) == "found"


def test_the_calls_real_deadline_ends_the_wait():
    """gRPC's time_remaining is real seconds: it ends a wait the manual clock never would."""
    waiter, clock, source = DispatchWaiter(), ManualClock(), Source()
    end = time.monotonic() + 0.3
    assert long_poll(source, wait_s=30, waiter=waiter, clock=clock, budget=None,
                     time_remaining=lambda: end - time.monotonic()) == "nothing"
    assert source.attempts == 2 and time.monotonic() >= end - 0.2  # waited, then answered
    again = Source()
    assert long_poll(again, wait_s=30, waiter=waiter, clock=clock, budget=None,
                     time_remaining=lambda: 0.1) == "nothing"  # inside the margin: no wait
    assert again.attempts == 1


def test_no_budget_left_answers_at_once():
    budget = StreamBudget(0)
    source = Source()
    assert long_poll(source, wait_s=30, waiter=DispatchWaiter(), clock=ManualClock(),
                     budget=budget) == "nothing"
    assert source.attempts == 1 and budget.open == 0
