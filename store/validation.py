"""Checks a message before anything is written (RocketMQ's Validators and the store's checks).
Every failure raises MessageIllegal naming the field; the store writes nothing."""
from __future__ import annotations

import re

from .codec import Message
from .errors import MessageIllegal

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


MAX_GROUP_LENGTH = 120  # TopicValidator.GROUP_MAX_LENGTH
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.isSysConsumerGroup


def check_group(group: str) -> None:
    """A consumer group name (RocketMQ's Validators.checkGroup and the proxy's system groups)."""
    if not group:
        raise MessageIllegal("consumer group", "empty")
    if not TOPIC_PATTERN.match(group):
        raise MessageIllegal("consumer group",
                             f"{group!r} has characters outside [%|a-zA-Z0-9_-]")
    if len(group) > MAX_GROUP_LENGTH:
        raise MessageIllegal("consumer group", f"length {len(group)} exceeds {MAX_GROUP_LENGTH}")
    if group.startswith(SYSTEM_GROUP_PREFIX):
        raise MessageIllegal("consumer group", f"{group} is a reserved system group "
                                               f"({SYSTEM_GROUP_PREFIX}...)")


def check_message(msg: Message, *, max_body: int, allow_system_topic: bool = False,
                  known_topics: set[str] | None = None) -> None:
    """Topic, body and queue id. Properties (separators, tag, size) are checked by
    codec.encode while it serializes them, so they are walked once per put.
    `known_topics` caches topics already found valid: the check is on the put path."""
    topic = msg.topic
    if known_topics is None or topic not in known_topics:
        check_topic(topic, allow_system=allow_system_topic)
        if known_topics is not None:
            known_topics.add(topic)
    body = msg.body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise MessageIllegal("body", "must be bytes")
    if len(body) > max_body:
        raise MessageIllegal("body", f"{len(body)} bytes exceeds maxMessageSize {max_body}")
    if msg.queue_id < 0:
        raise MessageIllegal("queue id", f"{msg.queue_id} is negative")
