"""The long poll (long_poll) and DispatchWaiter's async waiters, on a real event loop
in this thread, with a ManualClock and dispatch rounds fed by hand: who is woken by which round
(topic, group, tags, batch sizes), pokes, timeouts that leave nothing behind, the budget."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cluster.v2.long_poll import Attempt, DispatchWaiter, Interest, long_poll
from cluster.messaging.telemetry import StreamBudget
from common.clock import ManualClock


@dataclass(frozen=True)
class Arrival:  # the two fields of a DispatchRequest the waiter reads
    topic: str
    tags_code: int = 0


def run(coro):
    return asyncio.run(coro)


async def settle() -> None:
    for _ in range(5):  # resolved futures' callbacks run on the next loop iterations
        await asyncio.sleep(0)


async def waiting(waiter: DispatchWaiter, interests: list[Interest], clock: ManualClock):
    """One task per interest, each waiting from the waiter's current round; returns the tasks
    once all are registered."""
    seen = waiter.generation
    tasks = [asyncio.create_task(waiter.wait(seen, 30, i, clock)) for i in interests]
    await settle()
    assert waiter.async_waiting == len(interests)
    return tasks


def woken(tasks) -> list[int]:
    return [i for i, t in enumerate(tasks) if t.done()]


def test_one_message_wakes_the_oldest_waiter_of_each_group_only():
    async def scenario():
        waiter, clock = DispatchWaiter(), ManualClock()
        tasks = await waiting(waiter, [Interest("T", "G1"), Interest("T", "G1"),
                                       Interest("T", "G2"), Interest("U", "G1")], clock)
        waiter.on_dispatched([Arrival("T")])
        await settle()
        assert woken(tasks) == [0, 2]  # every group gets the message; topic U sleeps on
        assert waiter.async_waiting == 2
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert waiter.async_waiting == 0  # cancelled waits leave the queues
    run(scenario())


def test_a_round_wakes_as_many_waiters_as_its_messages_fill_by_batch_size():
    async def scenario():
        waiter, clock = DispatchWaiter(), ManualClock()
        tasks = await waiting(waiter, [Interest("T", "G", batch=16) for _ in range(20)], clock)
        waiter.on_dispatched([Arrival("T")] * 128)
        await settle()
        assert woken(tasks) == list(range(8))  # 8 x 16 = 128, oldest first
        waiter.on_dispatched([Arrival("T")] * 17)
        await settle()
        assert woken(tasks) == list(range(10))  # 16 + 1: two more
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    run(scenario())


def test_tags_decide_who_is_woken():
    async def scenario():
        waiter, clock = DispatchWaiter(), ManualClock()
        tasks = await waiting(waiter, [Interest("T", "G", frozenset({1})),
                                       Interest("T", "G", frozenset({2})),
                                       Interest("T", "G", None)], clock)
        waiter.on_dispatched([Arrival("T", 2)])
        await settle()
        assert woken(tasks) == [1]  # the oldest waiter wants tag 1: passed over, kept
        waiter.on_dispatched([Arrival("T", 3)])
        await settle()
        assert woken(tasks) == [1, 2]  # no tag filter takes anything
        assert waiter.async_waiting == 1
        tasks[0].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    run(scenario())


def test_a_poke_wakes_one_waiter_of_the_group_whatever_its_tags():
    async def scenario():
        waiter, clock = DispatchWaiter(), ManualClock()
        tasks = await waiting(waiter, [Interest("T", "G", frozenset({1})), Interest("T", "G"),
                                       Interest("T", "H")], clock)
        waiter.poke("T", "G")
        await settle()
        assert woken(tasks) == [0]
        waiter.poke("T", "nobody")  # nothing waits there: nothing happens
        await settle()
        assert woken(tasks) == [0]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    run(scenario())


def test_a_round_that_passed_before_the_wait_registered_ends_it_at_once():
    async def scenario():
        waiter, clock = DispatchWaiter(), ManualClock()
        seen = waiter.generation
        waiter.on_dispatched([Arrival("other")])  # between the attempt and the wait
        await asyncio.wait_for(waiter.wait(seen, 30, Interest("T", "G"), clock), 1)
        assert waiter.async_waiting == 0
    run(scenario())


class Source:
    def __init__(self) -> None:
        self.ready = False
        self.attempts = 0

    def __call__(self) -> Attempt[str]:
        self.attempts += 1
        return Attempt("found" if self.ready else "nothing", self.ready)


def test_the_async_poll_is_answered_by_a_dispatch_of_its_topic():
    async def scenario():
        waiter, clock, source, budget = DispatchWaiter(), ManualClock(), Source(), StreamBudget(5)
        poll = asyncio.create_task(long_poll(
            source, Interest("T", "G"), wait_s=30, waiter=waiter, clock=clock, budget=budget))
        await settle()
        assert source.attempts == 1 and budget.open == 1 and clock.waiters == 1
        waiter.on_dispatched([Arrival("other")])
        await settle()
        assert not poll.done() and source.attempts == 1  # another topic: not woken
        source.ready = True
        waiter.on_dispatched([Arrival("T")])
        assert await asyncio.wait_for(poll, 1) == "found"
        assert source.attempts == 2 and budget.open == 0 and clock.waiters == 0
    run(scenario())


def test_the_async_poll_ends_by_the_clock_not_by_real_time():
    async def scenario():
        waiter, clock, source = DispatchWaiter(), ManualClock(), Source()
        poll = asyncio.create_task(long_poll(
            source, Interest("T", "G"), wait_s=30, waiter=waiter, clock=clock, budget=None))
        await asyncio.sleep(0.2)
        assert not poll.done()  # 0.2 real seconds are nothing to a manual clock
        clock.advance(30)
        assert await asyncio.wait_for(poll, 2) == "nothing"
        assert waiter.async_waiting == 0
    run(scenario())


def test_a_spent_budget_answers_at_once():
    async def scenario():
        waiter, clock, source, budget = DispatchWaiter(), ManualClock(), Source(), StreamBudget(0)
        assert await asyncio.wait_for(long_poll(
            source, Interest("T", "G"), wait_s=30, waiter=waiter, clock=clock,
            budget=budget), 1) == "nothing"
        assert source.attempts == 1 and budget.open == 0
    run(scenario())
