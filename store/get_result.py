"""Results of reading messages by queue offset (RocketMQ's GetMessageStatus names)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from .codec import MessageRecord


class GetStatus(Enum):
    """How a pull by queue offset ended (RocketMQ GetMessageStatus); only FOUND has messages."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class QueueRef(NamedTuple):
    """A message as its consume queue unit has it (get_messages(decoded=False)): where its
    record is, not the record."""
    queue_offset: int
    physical_offset: int
    total_size: int


@dataclass
class GetMessageResult:
    """The answer to a pull by queue offset: the status, where the next pull starts, the
    queue's min and max offsets at the time, and the messages found (records, or QueueRefs
    when not decoded) with their total size."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageRecord | QueueRef] = field(default_factory=list)
    buffer_total_size: int = 0

    @property
    def found(self) -> bool:
        return self.status is GetStatus.FOUND
