"""Dead letters: where a message goes once its consumer group used up its delivery attempts
(ReceiveMessage past retryMaxTimes + 1, or ForwardMessageToDeadLetterQueue), and the copy that
goes there."""
from __future__ import annotations

from store.codec import Message, MessageRecord
from store.validation import DLQ_GROUP_TOPIC_PREFIX


def record_at(store, topic: str, queue_id: int, offset: int) -> MessageRecord | None:
    result = store.get_messages(topic, queue_id, offset, 1)
    for record in result.messages:
        if record.queue_offset == offset:
            return record
    return None


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def dead_letter(record: MessageRecord, group: str, attempts: int) -> Message:
    """The DLQ copy of a message: same body, tag, keys and unique id, with RocketMQ's origin
    properties, in %DLQ%<group> queue 0. Not waited for (a lost copy is redelivered)."""
    props = dict(record.properties)
    props.update({"RETRY_TOPIC": record.topic, "DLQ_ORIGIN_TOPIC": record.topic,
                  "DLQ_ORIGIN_MESSAGE_ID": record.uniq_key or record.msg_id,
                  "ORIGIN_MESSAGE_ID": record.uniq_key or record.msg_id,
                  "RECONSUME_TIME": str(attempts), "WAIT": "false"})
    for transient in ("REAL_TOPIC", "REAL_QID", "DELAY", "TIMER_DELIVER_MS"):
        props.pop(transient, None)
    return Message(topic=dlq_topic(group), body=bytes(record.body), queue_id=0,
                   properties=props, flag=record.flag, born_timestamp=record.born_timestamp,
                   born_host=record.born_host, reconsume_times=attempts)
