"""Waiting for a condition, calls in the background, free ports, and the short replication
timings every test cluster (in-process or real processes) runs with."""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

# Short HA timings (broker.conf names): failure detection and reconnects take well under a
# second or two.
FAST_HA = {"haSendHeartbeatInterval": "200", "haHousekeepingInterval": "3000",
           "haMaxTimeSlaveNotCatchup": "1500", "slaveTimeout": "1000",
           "haReconnectMinBackoff": "100", "haReconnectMaxBackoff": "500"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.05) -> None:
    """Poll `predicate` until it is true; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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
