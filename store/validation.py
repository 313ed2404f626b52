"""Checks a message before anything is written (RocketMQ's Validators and the store's checks).
Every failure raises MessageIllegal naming the field; the store writes nothing."""
from __future__ import annotations

import re

from . import codec
from .codec import Message
from .errors import MessageIllegal, PropertiesSizeExceeded

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_LENGTH = 127
MAX_RETRY_DLQ_TOPIC_LENGTH = 255
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# Topics only the broker itself writes (TopicValidator.SYSTEM_TOPIC_SET and friends).
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "rmq_sys_SYNC_BROKER_MEMBER",
    "rmq_sys_wheel_timer", "rmq_sys_REVIVE_LOG", "RMQ_SYS_TIMER_TOPIC",
})
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES)


def check_topic(topic: str, *, allow_system: bool = False) -> None:
    if not topic:
        raise MessageIllegal("topic", "empty")
    if not TOPIC_PATTERN.match(topic):
        raise MessageIllegal("topic", f"{topic!r} has characters outside [%|a-zA-Z0-9_-]")
    limit = (MAX_RETRY_DLQ_TOPIC_LENGTH
             if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
             else MAX_TOPIC_LENGTH)
    if len(topic) > limit:
        raise MessageIllegal("topic", f"length {len(topic)} exceeds {limit}")
    if not allow_system and is_system_topic(topic):
        raise MessageIllegal("topic", f"{topic} is a reserved system topic")


def check_properties(props: dict[str, str], limit: int) -> None:
    size = 0
    for k, v in props.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise MessageIllegal("property", f"{k!r} must map a string to a string")
        if not k:
            raise MessageIllegal("property", "empty property name")
        if "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
            raise MessageIllegal("property", f"{k!r} contains a separator character (0x01/0x02)")
        size += len(k.encode("utf-8")) + len(v.encode("utf-8")) + 2
    if size > limit:
        raise PropertiesSizeExceeded(size, limit)
    tag = props.get(codec.PROPERTY_TAGS)
    if tag is not None and ("|" in tag or not tag.strip()):
        raise MessageIllegal("tag", f"{tag!r} is empty or contains '|'")


def check_message(msg: Message, *, max_body: int, max_properties: int,
                  allow_system_topic: bool = False, queue_count: int | None = None) -> None:
    check_topic(msg.topic, allow_system=allow_system_topic)
    if not isinstance(msg.body, (bytes, bytearray, memoryview)):
        raise MessageIllegal("body", "must be bytes")
    if len(msg.body) > max_body:
        raise MessageIllegal("body", f"{len(msg.body)} bytes exceeds maxMessageSize {max_body}")
    if msg.queue_id < 0 or (queue_count is not None and msg.queue_id >= queue_count):
        raise MessageIllegal("queue id", f"{msg.queue_id} is out of range")
    check_properties(msg.properties, max_properties)
    if msg.sys_flag & ~0xFF & ~(0x7 << 8):
        raise MessageIllegal("sysFlag", f"unknown bits in 0x{msg.sys_flag:x}")
