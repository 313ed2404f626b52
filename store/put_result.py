"""Outcomes of a put, with RocketMQ's status names (PutMessageStatus)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class PutStatus(Enum):
    """How a put ended, under RocketMQ's PutMessageStatus names (`stored`: whether the
    message is in the commitlog regardless)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    FLUSH_DISK_FAILED = "FLUSH_DISK_FAILED"  # ours: the flush failed; the data is not durable
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """RocketMQ answers these with sendOK semantics: the message is in the commitlog but a
        durability step timed out. Anything else means it was not stored."""
        return self in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT,
                        PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE)


class AppendResult:
    """Where one record landed in the commitlog. A plain slots class: one is built per record
    under the put lock, so it stays cheap; the message id is formatted only when asked for."""

    __slots__ = ("wrote_offset", "wrote_bytes", "queue_offset", "store_timestamp", "_id_prefix")

    def __init__(self, wrote_offset: int, wrote_bytes: int, queue_offset: int,
                 store_timestamp: int, id_prefix: str) -> None:
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self._id_prefix = id_prefix

    @property
    def msg_id(self) -> str:
        """Offset message id: store host + physical offset, uppercase hex."""
        return f"{self._id_prefix}{self.wrote_offset:016X}"

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    def __repr__(self) -> str:
        return (f"AppendResult(wrote_offset={self.wrote_offset}, wrote_bytes={self.wrote_bytes}, "
                f"queue_offset={self.queue_offset}, store_timestamp={self.store_timestamp})")


class OriginalAppend(AppendResult):
    """Where an earlier put stored a message that this put repeated (the same message id,
    topic and body within the duplicate window, store/dedup/window.py): nothing was written
    for it, and the put answers with this place."""

    __slots__ = ()


@dataclass(slots=True)
class PutResult:
    """The answer to one put (of one message or a batch): its status, where each record
    landed (`appends`, empty when nothing was stored), a reason for a refusal, and how many of
    its messages were repeats answered with their original's place (`repeated`: OriginalAppend
    among the appends; nothing was written for them)."""

    status: PutStatus
    appends: tuple[AppendResult, ...] = ()
    reason: str = ""
    repeated: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def append(self) -> AppendResult | None:
        return self.appends[0] if self.appends else None

    @property
    def end_offset(self) -> int:
        """The end of the put's records in the log: what its flush and replication waits wait
        for (with repeats, the furthest of them and of what was written)."""
        if not self.appends:
            return 0
        if self.repeated:
            return max(a.end_offset for a in self.appends)
        return self.appends[-1].end_offset
