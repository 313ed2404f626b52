"""The checks and encoding of every put's input, outside any lock: what `MessageStore.append`
runs before the commitlog's put lock, as a function of the store's settings, so it can also
run where the store is not (a node's encode process, cluster/messaging/encode_process.py).

    messages -> check_message -> to_schedule (delay / timer) -> born time -> codec.encode
             -> dispatch hint -> (record, topic, queue id) for CommitLog.put_batch

A refusal (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED) covers the whole batch: nothing is
returned to append.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from . import codec
from .codec import EncodedRecord, Message
from .config import StoreConfig
from .dispatch import dispatch_hint
from .errors import MessageIllegal, PropertiesSizeExceeded
from .put_result import PutResult, PutStatus
from .schedule import _TIMER_PROPS, to_schedule
from .validation import check_message

_SCHEDULING_PROPS = frozenset((codec.PROPERTY_DELAY_TIME_LEVEL, *_TIMER_PROPS))

# What put_batch takes for each message: the record, its topic and its queue id.
Encoded = tuple[EncodedRecord, str, int]


@dataclass(frozen=True)
class EncodeSettings:
    """The store configuration a put's encoding depends on (a plain, marshal-able snapshot:
    `as_tuple` / `from_tuple` carry it to another process)."""

    max_message_size: int
    v2_allowed: bool  # autoMessageVersionOnTopicLen
    append_prop_crc: bool  # enabledAppendPropCRC
    max_properties_size: int
    store_host: str
    delay_levels_ms: tuple[int, ...]
    timer_max_delay_sec: int

    def __post_init__(self) -> None:
        if self.max_message_size <= 0 or self.max_properties_size <= 0:
            raise ValueError("maxMessageSize and maxPropertiesSize must be positive")

    @classmethod
    def of(cls, config: StoreConfig) -> "EncodeSettings":
        return cls(config.max_message_size, config.auto_message_version_on_topic_len,
                   config.enabled_append_prop_crc, config.max_properties_size,
                   config.store_host, tuple(config.delay_levels_ms()),
                   config.timer_max_delay_sec)

    def as_tuple(self) -> tuple:
        return (self.max_message_size, self.v2_allowed, self.append_prop_crc,
                self.max_properties_size, self.store_host, self.delay_levels_ms,
                self.timer_max_delay_sec)

    @classmethod
    def from_tuple(cls, values: tuple) -> "EncodeSettings":
        *head, levels, timer_max = values
        return cls(*head, tuple(levels), timer_max)


class TopicCache:
    """Topic names already found valid, for users and for the system (a put path check)."""

    def __init__(self) -> None:
        self.users: set[str] = set()
        self.system: set[str] = set()


def encode_messages(msgs: Sequence[Message], settings: EncodeSettings,
                    now_ms: Callable[[], int], topics: TopicCache, *,
                    allow_system_topic: bool = False,
                    hinted: bool = True) -> tuple[list[Encoded], PutResult | None]:
    """(encoded records, None), or ([], the refusal). `hinted`: each record carries its
    dispatch hint (only records that will be appended need one)."""
    if not msgs:
        return [], PutResult(PutStatus.MESSAGE_ILLEGAL, reason="empty batch")
    s = settings
    encode = codec.encode
    known = topics.system if allow_system_topic else topics.users
    try:
        encoded = []
        for m in msgs:
            check_message(m, max_body=s.max_message_size, allow_system_topic=allow_system_topic,
                          known_topics=known)
            props = m.properties
            if props and not _SCHEDULING_PROPS.isdisjoint(props):
                m = to_schedule(m, s.delay_levels_ms, now_ms(), s.timer_max_delay_sec)
            if not m.born_timestamp:
                m.born_timestamp = now_ms()
            record = encode(m, v2_allowed=s.v2_allowed, append_prop_crc=s.append_prop_crc,
                            max_properties_size=s.max_properties_size, store_host=s.store_host)
            if hinted:
                record.hint = dispatch_hint(m, record)
            encoded.append((record, m.topic, m.queue_id))
    except PropertiesSizeExceeded as e:
        return [], PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, reason=str(e))
    except MessageIllegal as e:
        return [], PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(e))
    return encoded, None
