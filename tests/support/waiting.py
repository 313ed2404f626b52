"""Waiting for a condition, free ports, and the short replication timings every test cluster
(in-process or real processes) runs with."""
from __future__ import annotations

import socket
import time
from typing import Callable

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
