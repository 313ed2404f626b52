"""What reput hands to the dispatchers (consume queues, index), and how a record becomes one.

A DispatchRequest describes one committed record. Prepared and rollback transaction records
are never dispatched to consume queues or the index (they have no queue offset). Messages of the
schedule topic carry their delivery time as tagsCode instead of a tag hash, so the schedule
service can find due messages from the consume queue alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from . import codec
from .codec import SysFlag

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_TAG_CODES: dict[str, int] = {}


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str]

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & SysFlag.TRANSACTION_MASK

    @property
    def dispatchable(self) -> bool:
        """Prepared and rollback records never enter consume queues or the index."""
        t = self.sys_flag & SysFlag.TRANSACTION_MASK
        return t != SysFlag.TRANSACTION_PREPARED_TYPE and t != SysFlag.TRANSACTION_ROLLBACK_TYPE

    @property
    def end_offset(self) -> int:
        return self.commit_log_offset + self.msg_size


class Dispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...


def schedule_tags_code(properties: dict[str, str], store_timestamp: int,
                       delay_level_ms: Callable[[int], int]) -> int:
    """Delivery time of a schedule-topic message: an explicit TIMER_DELIVER_MS, or the store
    time plus the delay of its DELAY level."""
    deliver = properties.get(codec.PROPERTY_TIMER_DELIVER_MS)
    if deliver:
        return int(deliver)
    level = int(properties.get(codec.PROPERTY_DELAY_TIME_LEVEL, "0") or 0)
    return store_timestamp + delay_level_ms(level) if level > 0 else store_timestamp


def build_request(buf, pos: int, total: int, physical_offset: int,
                  delay_level_ms: Callable[[int], int]) -> DispatchRequest:
    """Turn a record already checked valid at buf[pos:pos+total] into a DispatchRequest."""
    queue_id, queue_offset, sys_flag, store_ts, prepared, topic, props = \
        codec.decode_dispatch_fields(buf, pos, total)
    if topic == SCHEDULE_TOPIC:
        tcode = schedule_tags_code(props, store_ts, delay_level_ms)
    else:
        tag = props.get(codec.PROPERTY_TAGS)
        if tag:
            tcode = _TAG_CODES.get(tag)
            if tcode is None:
                tcode = codec.java_string_hash(tag)
                if len(_TAG_CODES) < 65536:  # tags repeat; keys are unique and not cached
                    _TAG_CODES[tag] = tcode
        else:
            tcode = 0
    return DispatchRequest(topic, queue_id, physical_offset, total, tcode, store_ts, queue_offset,
                           props.get(codec.PROPERTY_KEYS, ""),
                           props.get(codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag,
                           prepared, props)
