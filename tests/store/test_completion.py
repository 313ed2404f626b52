from __future__ import annotations

import asyncio
import threading

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
