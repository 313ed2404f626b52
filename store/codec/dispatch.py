"""What reput hands to the dispatchers (consume queues, index), and how a record becomes one.

A DispatchRequest describes one committed record. Prepared and rollback transaction records
are never dispatched to consume queues or the index (they have no queue offset). Messages of the
schedule topic carry their delivery time as tagsCode instead of a tag hash, so the schedule
service can find due messages from the consume queue alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from store import codec
from . import SysFlag

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# Where a transactional message waits for its commit (RocketMQ's half topic); the records are
# written by cluster/messaging/transaction*.py, the duplicate window (store/dedup/) knows them.
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
_TAG_CODES: dict[str, int] = {}


@dataclass(slots=True)
class DispatchRequest:
    """One committed record as the dispatchers need it: where it is in the commitlog, its
    queue and queue offset, tagsCode (a tag hash, or the delivery time for the schedule
    topic), store time, keys and transaction type. Built by reput's decode or left by the
    put as a hint; not shared between threads once handed over."""

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
    # The record's properties as stored (`name` 0x01 `value` 0x02 ...): dispatch itself needs
    # only TAGS, KEYS and UNIQ_KEY, so the dict is built only if someone asks for it.
    properties_text: str = ""
    # bodyCRC from the record's header: the duplicate window compares a repeated send's body
    # by it (store/dedup/)
    body_crc: int = 0

    @property
    def properties(self) -> dict[str, str]:
        return codec.string_to_properties(self.properties_text)

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
    """Takes each committed record once, in commitlog order, and must skip a repeat of what
    it already holds (reput re-dispatches after a failure or a restart). One may also offer
    `dispatch_many(requests)`, the same for a step's records at once (store/reput.py)."""

    def dispatch(self, request: DispatchRequest) -> None: ...


def delay_level_lookup(levels_ms: Sequence[int]) -> Callable[[int], int]:
    """level -> its delay in ms (messageDelayLevel): level 1 is the first entry, a level past
    the last uses the last (RocketMQ), level 0 means no delay."""
    def delay_level_ms(level: int) -> int:
        return levels_ms[min(level, len(levels_ms)) - 1] if level > 0 else 0
    return delay_level_ms


def schedule_tags_code(properties: dict[str, str], store_timestamp: int,
                       delay_level_ms: Callable[[int], int]) -> int:
    """Delivery time of a schedule-topic message: an explicit TIMER_DELIVER_MS, or the store
    time plus the delay of its DELAY level."""
    deliver = properties.get(codec.PROPERTY_TIMER_DELIVER_MS)
    if deliver:
        return int(deliver)
    level = int(properties.get(codec.PROPERTY_DELAY_TIME_LEVEL, "0") or 0)
    return store_timestamp + delay_level_ms(level) if level > 0 else store_timestamp


_property_value = codec.property_value


def request_from_fields(fields: tuple[int, int, int, int, int, int, str, str, int],
                        physical_offset: int,
                        delay_level_ms: Callable[[int], int]) -> DispatchRequest:
    """A DispatchRequest from codec.dispatch_fields' tuple (reput's per-record path)."""
    total, queue_id, queue_offset, sys_flag, store_ts, prepared, topic, text, crc = fields
    if not text:
        return DispatchRequest(topic, queue_id, physical_offset, total,
                               store_ts if topic == SCHEDULE_TOPIC else 0, store_ts,
                               queue_offset, "", None, sys_flag, prepared, text, crc)
    if topic == SCHEDULE_TOPIC:
        tcode = schedule_tags_code(codec.string_to_properties(text), store_ts, delay_level_ms)
    else:
        tcode = tag_code(_property_value(text, codec.PROPERTY_TAGS))
    return DispatchRequest(topic, queue_id, physical_offset, total, tcode, store_ts, queue_offset,
                           _property_value(text, codec.PROPERTY_KEYS) or "",
                           _property_value(text, codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                           sys_flag, prepared, text, crc)


def tag_code(tag: str | None) -> int:
    """tagsCode of a record outside the schedule topic: String.hashCode of its tag, 0 without
    one."""
    if not tag:
        return 0
    code = _TAG_CODES.get(tag)
    if code is None:
        code = codec.java_string_hash(tag)
        if len(_TAG_CODES) < 65536:  # tags repeat; keys are unique and not cached
            _TAG_CODES[tag] = code
    return code


def dispatch_hint(msg: codec.Message, record: codec.EncodedRecord) -> DispatchRequest | None:
    """What reput would decode from `record` once it is appended, built from the message that
    was encoded (request_from_fields' rules), so the master's reput need not decode its own
    puts. The commitlog fills in the offsets and the store time under its put lock
    (`fill_hint`). None where decoding is simpler than the rule: schedule-topic records (their
    tagsCode depends on the store time) and records with a property CRC tail."""
    topic = msg.topic
    if record.prop_crc or topic == SCHEDULE_TOPIC:
        return None
    props = msg.properties
    return DispatchRequest(topic, msg.queue_id, 0, 0, tag_code(props.get(codec.PROPERTY_TAGS)),
                           0, 0, props.get(codec.PROPERTY_KEYS) or "",
                           props.get(codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                           record.sys_flag, msg.prepared_transaction_offset,
                           record.properties_text, record.body_crc)


# The most hints waiting for reput: past it a put leaves none (reput decodes those records)
# and reput drops hints it has already passed. A hint of a 1 KiB message with a tag, a key and
# a unique id holds about 400 bytes (its properties text most of it), so a reput held back
# (a confirm offset that does not move) keeps at most about 26 MB of them; normally reput is
# a step (a few thousand records) behind.
HINTS_MAX = 65536


def fill_hint(hint: DispatchRequest, physical_offset: int, size: int, queue_offset: int,
              store_timestamp: int) -> None:
    """The fields of a hint known only under the put lock (CommitLog._append_locked)."""
    hint.commit_log_offset = physical_offset
    hint.msg_size = size
    hint.consume_queue_offset = queue_offset
    hint.store_timestamp = store_timestamp


def build_request(buf, pos: int, total: int, physical_offset: int,
                  delay_level_ms: Callable[[int], int]) -> DispatchRequest:
    """Turn a record already checked valid at buf[pos:pos+total] into a DispatchRequest.
    Raises ValueError when the bytes there are not a valid record."""
    fields = codec.dispatch_fields(buf, pos, pos + total)
    if fields is None or fields[0] != total:
        raise ValueError(f"no valid record of {total} bytes at {pos}")
    return request_from_fields(fields, physical_offset, delay_level_ms)
