"""How long a master under a controller may keep acknowledging writes on its own word.

The controller elects a new master only after the old one was silent for its failover timeout
T. Each answer the master gets renews its lease until `lease_ms` (< T) after the moment the
heartbeat was *sent* — measured on the master's own monotonic clock, so no clock is compared
across machines: the controller saw the heartbeat after it was sent, so the lease ends before
the controller's T runs out for the same heartbeat. A master whose lease ran out stops
acknowledging writes that no in-sync slave confirms (master_role.py), so two masters never both
acknowledge: a slave follows one master at a time, and the other side's acks need a slave.
"""
from __future__ import annotations

import threading

from common.clock import Clock


class WriteLease:
    """Owns the lease's end (monotonic seconds); `_lock` guards it."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._until: float | None = None
        self.lease_ms = 0

    def renew(self, sent_at: float, lease_ms: int) -> None:
        """The controller answered a heartbeat sent at `sent_at` (monotonic seconds)."""
        with self._lock:
            until = sent_at + lease_ms / 1000.0
            self._until = until if self._until is None else max(self._until, until)
            self.lease_ms = lease_ms

    def valid(self) -> bool:
        with self._lock:
            return self._until is not None and self._clock.monotonic() < self._until

    def expired_for_ms(self) -> int:
        """How long ago the lease ended (0 while it is valid or never granted)."""
        with self._lock:
            if self._until is None:
                return 0
            return max(0, int((self._clock.monotonic() - self._until) * 1000))
