"""A delayed message and its schedule-topic copy: RocketMQ's ScheduleMessageService, put side.

A message (`to_schedule`, `put_scheduled`) is rewritten into the schedule topic
SCHEDULE_TOPIC_XXXX when it is a normal or committed-transaction message (prepared and rollback
transaction messages are never delayed) and

- has property DELAY = level > 0 (levels 1..N of `message_delay_level`, N = 18 by default; a
  level above N is clamped to N like RocketMQ). It goes to schedule queue `level - 1`; any
  TIMER_* property is dropped (RocketMQ: a delay level wins over a timer). Or
- has TIMER_DELAY_SEC, TIMER_DELAY_MS (relative to `now_ms`) or TIMER_DELIVER_MS (absolute
  epoch ms), checked in that order (RocketMQ HookUtils.transformTimerMessage). The delivery time
  is written as TIMER_DELIVER_MS (the relative properties are dropped) and the message goes to
  the dedicated "timestamp queue" of the schedule topic, queue id N (= 18 by default, one past
  the level queues; its offset is stored as level N + 1 = 19). A delivery time not after
  `now_ms` means "deliver now": the message comes back unchanged. One more than
  `timer_max_delay_sec` ahead is rejected with MessageIllegal("delivery time", ...).

The original topic and queue id are kept in REAL_TOPIC / REAL_QID. The dispatcher then writes
the delivery time as the consume-queue tagsCode (store time + level delay, or TIMER_DELIVER_MS),
so the service below finds due messages from the consume queue alone.

`rebuild_real_message` turns such a copy back into the message to deliver, which the schedule
service (schedule.py) appends when it is due.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from store import codec
from store.codec import Message, MessageRecord, SysFlag
from store.codec.dispatch import SCHEDULE_TOPIC
from store.errors import MessageIllegal
from store.put_result import PutResult, PutStatus
from store.validation import check_topic

if TYPE_CHECKING:
    from store.message_store import MessageStore

PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
# Any of them asks for a delivery time (a message with none is stored as it is).
TIMER_PROPERTIES = (codec.PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC,
                    PROPERTY_TIMER_DELAY_MS)
# Removed from a message when it is delivered to its real topic.
_SCHEDULE_PROPS = (codec.PROPERTY_DELAY_TIME_LEVEL, *TIMER_PROPERTIES, codec.PROPERTY_REAL_TOPIC,
                   codec.PROPERTY_REAL_QUEUE_ID, codec.PROPERTY_WAIT_STORE_MSG_OK, codec.PROP_CRC_NAME)


def timer_queue_id(levels: Sequence[int]) -> int:
    """The schedule queue of deliver-at messages: one past the level queues."""
    return len(levels)


def _delay_level(props: dict[str, str]) -> int:
    raw = props.get(codec.PROPERTY_DELAY_TIME_LEVEL)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise MessageIllegal("delay level", f"{raw!r} is not an integer") from None


def _deliver_ms(props: dict[str, str], now_ms: int) -> int | None:
    for name, base, scale in ((PROPERTY_TIMER_DELAY_SEC, now_ms, 1000),
                              (PROPERTY_TIMER_DELAY_MS, now_ms, 1),
                              (codec.PROPERTY_TIMER_DELIVER_MS, 0, 1)):
        raw = props.get(name)
        if raw is None:
            continue
        try:
            return base + int(raw) * scale
        except ValueError:
            raise MessageIllegal("delivery time", f"{name}={raw!r} is not an integer") from None
    return None


def to_schedule(msg: Message, levels: Sequence[int], now_ms: int, max_delay_sec: int) -> Message:
    """The message to store for `msg`: a schedule-topic copy when it asks for a delay level or a
    future delivery time, else `msg` itself (see the module doc). Never mutates `msg`. Raises
    MessageIllegal for an unparsable DELAY / TIMER_* value or a delivery time more than
    `max_delay_sec` ahead of `now_ms`."""
    if msg.topic == SCHEDULE_TOPIC:
        return msg
    tran = msg.sys_flag & SysFlag.TRANSACTION_MASK
    if tran not in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE):
        return msg
    props = msg.properties
    level = _delay_level(props)
    if level > 0:
        if not levels:
            raise MessageIllegal("delay level", "no delay levels configured")
        level = min(level, len(levels))
        new = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES}
        new[codec.PROPERTY_DELAY_TIME_LEVEL] = str(level)
        queue_id = level - 1
    else:
        deliver = _deliver_ms(props, now_ms)
        if deliver is None or deliver <= now_ms:
            return msg
        if deliver - now_ms > max_delay_sec * 1000:
            raise MessageIllegal("delivery time",
                                 f"{deliver} is {deliver - now_ms} ms ahead, more than the "
                                 f"maximum of {max_delay_sec} s")
        new = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES}
        new[codec.PROPERTY_TIMER_DELIVER_MS] = str(deliver)
        queue_id = timer_queue_id(levels)
    new[codec.PROPERTY_REAL_TOPIC] = msg.topic
    new[codec.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=SCHEDULE_TOPIC, queue_id=queue_id, properties=new)


def put_scheduled(store: "MessageStore", msgs: Sequence[Message]) -> PutResult:
    """Producer-facing put: refuses system topics, applies `to_schedule` with the store's
    levels, clock and timer_max_delay_sec, then puts the batch (the schedule topic allowed)."""
    levels = store.config.delay_levels_ms()
    now = store.clock.now_ms()
    try:
        out = []
        for m in msgs:
            check_topic(m.topic, allow_system=False)
            out.append(to_schedule(m, levels, now, store.config.timer_max_delay_sec))
    except MessageIllegal as e:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(e))
    return store.put_messages(out, allow_system_topic=True)


def rebuild_real_message(record: MessageRecord) -> Message:
    """The message to deliver for a schedule-topic record (RocketMQ messageTimeup). Raises
    MessageIllegal when REAL_TOPIC / REAL_QID are missing or unusable."""
    props = record.properties
    topic = props.get(codec.PROPERTY_REAL_TOPIC)
    if not topic:
        raise MessageIllegal("real topic", "REAL_TOPIC missing")
    raw_qid = props.get(codec.PROPERTY_REAL_QUEUE_ID)
    try:
        queue_id = int(raw_qid)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MessageIllegal("real queue id", f"REAL_QID {raw_qid!r} is not an integer") from None
    if queue_id < 0:
        raise MessageIllegal("real queue id", f"REAL_QID {queue_id} is negative")
    return Message(topic, record.body, queue_id,
                   {k: v for k, v in props.items() if k not in _SCHEDULE_PROPS},
                   flag=record.flag, sys_flag=record.sys_flag,
                   born_timestamp=record.born_timestamp, born_host=record.born_host,
                   store_host=record.store_host, reconsume_times=record.reconsume_times)
