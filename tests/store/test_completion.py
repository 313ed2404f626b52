from __future__ import annotations

import threading

from store.completion import Completion


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
