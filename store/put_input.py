"""A put's input, checked and encoded before the put lock.

For every message of a batch: its topic, body and queue id (validation.check_message); a
delay level or a delivery time moves it to the schedule topic (schedule_rewrite.to_schedule);
a missing born timestamp becomes now; codec.encode writes the record and checks its
properties as it does (separators, tag, maxPropertiesSize); the record gets its dispatch hint
(dispatch.dispatch_hint) when it will be appended, and, while the duplicate window is on, the
client send it stores (dedup.window.sent_as: its id, topic and body CRC, for the window's
check under the put lock). All or nothing: one bad message refuses the batch, as a PutResult,
and nothing of it is appended.
"""
from __future__ import annotations

from typing import Callable, Sequence

from . import codec
from common.clock import Clock
from .codec import EncodedRecord, Message
from .config import StoreConfig
from .codec.dispatch import dispatch_hint
from .dedup.window import sent_as
from .errors import MessageIllegal, PropertiesSizeExceeded
from .put_result import PutResult, PutStatus
from .schedule.schedule_rewrite import TIMER_PROPERTIES, to_schedule
from .validation import check_message

# A message with one of these asks for a delay (to_schedule decides what it becomes).
SCHEDULING_PROPERTIES = frozenset((codec.PROPERTY_DELAY_TIME_LEVEL, *TIMER_PROPERTIES))

_UNIQ_KEY = codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

# (the encoded record, its topic, its queue id): what CommitLog.put_batch appends
PutRecord = tuple[EncodedRecord, str, int]


class PutInput:
    """Checks and encodes put batches. Owns the sets of topics already found valid (one with
    system topics allowed, one without), so each topic name is checked once; they only grow
    and a set's add is atomic under the GIL, so puts on any thread share them unlocked.
    `config` is called on every batch: the store swaps its config at runtime (reconfigure)."""

    def __init__(self, config: Callable[[], StoreConfig], clock: Clock,
                 delay_levels: Sequence[int]) -> None:
        self.config = config
        self.clock = clock
        self.delay_levels = delay_levels
        self._valid_topics: set[str] = set()
        self._valid_topics_sys: set[str] = set()

    def encode(self, msgs: Sequence[Message], allow_system_topic: bool, *,
               hinted: bool = True) -> tuple[list[PutRecord], PutResult | None]:
        """(records, None), or ([], the refusal). `hinted`: each record carries its dispatch
        hint (only records that will be appended need one)."""
        if not msgs:
            return [], PutResult(PutStatus.MESSAGE_ILLEGAL, reason="empty batch")
        c = self.config()
        encode = codec.encode
        now_ms = self.clock.now_ms
        v2, prop_crc = c.auto_message_version_on_topic_len, c.enabled_append_prop_crc
        max_props, host, max_body = c.max_properties_size, c.store_host, c.max_message_size
        known = self._valid_topics_sys if allow_system_topic else self._valid_topics
        window = c.duplicate_window_seconds > 0
        try:
            encoded = []
            for m in msgs:
                check_message(m, max_body=max_body, allow_system_topic=allow_system_topic,
                              known_topics=known)
                props = m.properties
                if props and not SCHEDULING_PROPERTIES.isdisjoint(props):
                    m = to_schedule(m, self.delay_levels, now_ms(), c.timer_max_delay_sec)
                if not m.born_timestamp:
                    m.born_timestamp = now_ms()
                record = encode(m, v2_allowed=v2, append_prop_crc=prop_crc,
                                max_properties_size=max_props, store_host=host)
                if hinted:
                    record.hint = dispatch_hint(m, record)
                if window and props:
                    record.sent_as = sent_as(props.get(_UNIQ_KEY), m.topic, m.sys_flag,
                                             record.body_crc, m.properties)
                encoded.append((record, m.topic, m.queue_id))
        except PropertiesSizeExceeded as e:
            return [], PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, reason=str(e))
        except MessageIllegal as e:
            return [], PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(e))
        return encoded, None
