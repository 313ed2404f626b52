from __future__ import annotations

import asyncio
import sys
import threading
from typing import Callable, Iterator

from common.completion import Completion


def test_wait_returns_the_value_set_by_another_thread():
    c: Completion[int] = Completion()
    threading.Timer(0.01, c.complete, args=(7,)).start()
    assert c.wait(5) == 7 and c.done
    assert not c.complete(8) and c.value == 7


def test_wait_times_out_with_none():
    c: Completion[int] = Completion()
    assert c.wait(0.01) is None and not c.done


def test_callbacks_run_once_before_or_after_completion():
    seen = []
    c: Completion[str] = Completion()
    c.add_callback(seen.append)
    c.complete("x")
    c.add_callback(seen.append)
    assert seen == ["x", "x"]
    assert c.wait() == "x" and c.wait() == "x"  # repeatable


def test_wait_async_gets_the_value_from_another_thread_or_the_loop_itself():
    async def run() -> list:
        from_thread: Completion[int] = Completion()
        threading.Timer(0.01, from_thread.complete, args=(7,)).start()
        on_loop: Completion[int] = Completion()
        asyncio.get_running_loop().call_later(0.01, on_loop.complete, 8)
        done: Completion[int] = Completion()
        done.complete(9)
        return [await from_thread.wait_async(5), await on_loop.wait_async(5),
                await done.wait_async(5)]
    assert asyncio.run(run()) == [7, 8, 9]


def test_wait_async_times_out_with_none_and_a_late_value_is_harmless():
    async def run() -> int | None:
        c: Completion[int] = Completion()
        value = await c.wait_async(0.01)
        c.complete(1)  # its callback finds the wait over
        await asyncio.sleep(0.01)
        return value
    assert asyncio.run(run()) is None


def each_interleaving(first: Callable[[Completion], object], second: Callable[[Completion], object]
                      ) -> Iterator[tuple[Completion, dict]]:
    """For every line of Completion.complete at which a thread may lose the GIL: one thread
    runs `first(c)` on a fresh Completion and is held at that line while another runs
    `second(c)` (to its end, or for 0.2 s when it blocks on a lock the first one holds); then
    both finish. Yields the Completion and what each returned ("first", "second")."""
    code = Completion.complete.__code__
    k = 0
    while True:
        c: Completion[int] = Completion()
        out: dict = {}
        lines = 0
        others: list[threading.Thread] = []

        def local(frame, event, arg):
            nonlocal lines
            if event == "line":
                if lines == k:
                    other = threading.Thread(target=lambda: out.update(second=second(c)))
                    other.start()
                    other.join(0.2)
                    others.append(other)
                lines += 1
            return local

        def run_first() -> None:
            sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
            try:
                out["first"] = first(c)
            finally:
                sys.settrace(None)

        t = threading.Thread(target=run_first)
        t.start()
        t.join(5)
        if not others:
            assert k > 2  # complete() has been held at each of its lines
            return
        others[0].join(5)
        yield c, out
        k += 1


def test_a_callback_added_while_another_thread_completes_runs_exactly_once():
    seen: dict[Completion, list[int]] = {}
    for c, out in each_interleaving(lambda c: c.complete(1),
                                    lambda c: c.add_callback(seen.setdefault(c, []).append)):
        assert out["first"] is True
        assert seen[c] == [1]


def test_of_two_threads_completing_at_once_exactly_one_sets_the_value():
    for c, out in each_interleaving(lambda c: c.complete(1), lambda c: c.complete(2)):
        assert sorted((out["first"], out["second"])) == [False, True]
        assert c.wait(0) == (1 if out["first"] else 2) == c.value
