"""Refusals logged once per peer host and reason every LOG_EVERY_S seconds, with a count of the
ones held back: a client or a rogue peer retrying in a loop must not flood the log, and an
operator still sees that it goes on. Used by the membership gate and the ACL interceptor."""
from __future__ import annotations

import logging
import threading

from common.clock import SYSTEM_CLOCK, Clock

LOG_EVERY_S = 10.0
MAX_TRACKED = 1024  # (host, reason) pairs; past it the throttle forgets, never the refusals


class RefusalLog:
    """Owns the throttle state (`_logged`: (host, reason) -> (last logged, held back) and the
    `refusals` count), both guarded by `_lock`: handlers call it from any thread."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._logger = logger
        self._level = level
        self._clock = clock
        self._lock = threading.Lock()
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}
        self.refusals = 0

    def refused(self, method: str, peer: str, reason: str) -> None:
        host = peer.rpartition(":")[0] or peer
        now = self._clock.monotonic()
        with self._lock:
            self.refusals += 1
            last, held_back = self._logged.get((host, reason), (None, 0))
            if last is None or now - last >= LOG_EVERY_S:
                self._logged[(host, reason)] = (now, 0)
                more = f" ({held_back} more since the last report)" if held_back else ""
                self._logger.log(self._level, "refused %s from %s: %s%s", method, peer,
                                 reason, more)
            else:
                self._logged[(host, reason)] = (last, held_back + 1)
            if len(self._logged) > MAX_TRACKED:
                self._logged.clear()
