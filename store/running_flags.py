"""Whether the store accepts writes, and why not.

Two kinds of reasons: sticky ones (a failed flush or write: the kernel may have dropped the
data, so only a restart with recovery makes the store writable again) and transient ones (a full
disk, the disk-pressure guard) that clear by themselves when the condition ends.
"""
from __future__ import annotations

import threading

DISK_ERROR = "DISK_ERROR"  # sticky
DISK_FULL = "DISK_FULL"  # transient: the disk-pressure guard
CREATE_FILE_FAILED = "CREATE_FILE_FAILED"  # transient: the next file could not be created
SHUTDOWN = "SHUTDOWN"
DISPATCH_ERROR = "DISPATCH_ERROR"  # transient: reput could not write a consume queue / index
NOT_STARTED = "NOT_STARTED"
LOGICS_QUEUE_ERROR = "LOGICS_QUEUE_ERROR"  # sticky: a consume queue or index write failed
_STICKY = {DISK_ERROR, LOGICS_QUEUE_ERROR}


class RunningFlags:
    """The reasons the store refuses writes, by flag (the constants above), each with a
    message; writable when there is none. Starts with NOT_STARTED. Sticky flags survive
    `clear`.

    `_lock` guards the writes and the reads that copy or join the table; `has` and
    `writable` read it unlocked (one dict lookup, atomic), since every put asks."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {NOT_STARTED: "store not started"}
        self._lock = threading.Lock()

    def set(self, flag: str, message: str) -> None:
        with self._lock:
            if flag not in self._reasons:
                self._reasons[flag] = message

    def update(self, flag: str, message: str) -> None:
        """Set `flag`, replacing its message when it is already set (a reason that changes
        while the condition lasts: the groups holding a full disk)."""
        with self._lock:
            self._reasons[flag] = message

    def clear(self, flag: str) -> None:
        """Clear a transient reason. Sticky reasons stay until the process restarts."""
        with self._lock:
            if flag not in _STICKY:
                self._reasons.pop(flag, None)

    def has(self, flag: str) -> bool:
        return flag in self._reasons

    @property
    def writable(self) -> bool:
        return not self._reasons

    @property
    def reasons(self) -> dict[str, str]:
        with self._lock:
            return dict(self._reasons)

    @property
    def reason(self) -> str:
        """One line for humans; empty when writable."""
        with self._lock:
            return "; ".join(f"{k}: {v}" for k, v in self._reasons.items())
