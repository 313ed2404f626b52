"""Waiting for a condition, calls in the background, free ports, and the short replication
timings every test cluster (in-process or real processes) runs with."""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from common.clock import ManualClock

# Short HA timings (broker.conf names): failure detection and reconnects take well under a
# second or two.
FAST_HA = {"haSendHeartbeatInterval": "200", "haHousekeepingInterval": "3000",
           "haMaxTimeSlaveNotCatchup": "1500", "slaveTimeout": "1000",
           "haReconnectMinBackoff": "100", "haReconnectMaxBackoff": "500"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.05) -> Any:
    """Poll `predicate` until it is true and return that value; AssertionError naming `what`
    after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def waiting_on(clock: ManualClock, timeout: float = 10) -> None:
    """Wait until a long poll sits in its wait on `clock`: from then on only a dispatch, the
    clock's advance or the call's deadline ends it (an advance before would be lost on it)."""
    wait_until(lambda: clock.waiters > 0, timeout, "a long poll waiting on the clock",
               interval=0.005)


def in_background(call: Callable[[], Any]) -> Future:
    """Run call() in a daemon thread now; its outcome as a Future (result(timeout) re-raises
    what it raised)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as e:  # handed to the test through the future
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return future
