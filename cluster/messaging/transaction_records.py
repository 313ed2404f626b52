"""Transactional messages as commitlog records, the way RocketMQ's broker writes them
(TransactionalMessageBridge / EndTransactionProcessor), so a store written here reads like a
RocketMQ broker's and every transaction's state replicates with the data.

Half record: the producer's message parked where no consumer looks until it is committed.

    topic        RMQ_SYS_TRANS_HALF_TOPIC, queue 0
    sysFlag      TRANSACTION_NOT_TYPE (RocketMQ resets the client's PREPARED flag, so reput
                 dispatches the record into the half queue and the checker can walk it)
    body, bornTimestamp, bornHost, flag      the producer's
    properties   the message's own (UNIQ_KEY, TAGS, KEYS, user properties, __BORNHOST, ...) plus
                 REAL_TOPIC                      the topic it was sent to
                 REAL_QID                        the queue the server picked for it
                 TRAN_MSG=true                   marks a transactional message
                 PGROUP=<topic>                  the producer group; RocketMQ 5's proxy uses the
                                                 topic, since v2 producers have no group
                 __transactionId__=<UNIQ_KEY>
                 CHECK_IMMUNITY_TIME_IN_SECONDS  the producer's orphaned_transaction_recovery_
                                                 duration, when given
    A copy written for each check-back (RocketMQ's putBackHalfMsgQueue) adds
                 TRANSACTION_CHECK_TIMES=<n>     how many checks were sent so far
                 TRAN_PREPARED_QUEUE_OFFSET=<q>  the half queue offset of the FIRST half record
                                                 of the transaction (its "root"), so every copy
                                                 names the transaction it belongs to

Op record: "this half is done" (committed, rolled back or given up), never checked again.

    topic        RMQ_SYS_TRANS_OP_HALF_TOPIC, queue 0 (the half record's queue id)
    TAGS         "d" (TransactionalMessageUtil.REMOVE_TAG)
    body         the half queue offset as ASCII decimal, e.g. b"42"; RocketMQ 5 batches
                 several as b"42,43,57", which the reader accepts too

Committed record (endMessageTransaction): the half record rebuilt on its real topic and queue,
sysFlag TRANSACTION_COMMIT_TYPE, preparedTransactionOffset = the half record's commitlog offset,
properties without REAL_TOPIC, REAL_QID, TRAN_MSG and TRAN_PREPARED_QUEUE_OFFSET.

Transaction id (SendResultEntry.transaction_id, RecoverOrphanedTransactionCommand), opaque to
the clients:

    <offset msg id>-<check>

The offset message id of the half record it names (uppercase hex of store host IP + i32 port +
i64 commitlog offset, 32 characters for IPv4, 56 for IPv6, RocketMQ's offset msgId) locates the
record directly and survives failover (records replicate byte for byte, store host included).
The check is handle_mac.mac(key, "T1", offset msg id, topic, message id) under the broker
group's shared key: without the key nobody can name a half message (the offsets are easy to
guess), so a producer cannot commit or roll back another producer's transaction, and an id
used with another topic or message id is refused before anything is looked up. The record it
points at is still checked (topic, message id, that it is a half message). An id without the
check (the format before it) is INVALID_TRANSACTION_ID.
"""
from __future__ import annotations

import dataclasses
import logging

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store import codec
from store.codec import Message, MessageRecord, SysFlag
from store.codec.dispatch import TRANS_HALF_TOPIC
from store.errors import MessageIllegal

from cluster.consume.handle_mac import mac, verify
from cluster.v2.convert import record_to_v2

from cluster.v2.v2_status import V2Error

log = logging.getLogger(__name__)

HALF_TOPIC = TRANS_HALF_TOPIC
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
HALF_QUEUE_ID = 0
REMOVE_TAG = "d"
OFFSET_SEPARATOR = ","

PROPERTY_REAL_TOPIC = codec.PROPERTY_REAL_TOPIC
PROPERTY_REAL_QUEUE_ID = codec.PROPERTY_REAL_QUEUE_ID
PROPERTY_TRANSACTION_PREPARED = codec.PROPERTY_TRANSACTION_PREPARED
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_CHECK_TIMES = codec.PROPERTY_TRANSACTION_CHECK_TIMES
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
# Removed from the committed message (they describe the half, not the message).
_HALF_ONLY = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED,
              PROPERTY_PREPARED_QUEUE_OFFSET)
MAX_IMMUNITY_SECONDS = 24 * 3600  # longer than any retention worth waiting for


# -- sending ------------------------------------------------------------------------------------
def check_transactional_send(messages) -> bool:
    """True when the request sends a transactional message; refuses what RocketMQ refuses:
    a transactional message in a batch, or one with a delivery time (delay + transaction)."""
    if len(messages) == 1:  # the usual send: no generator for one message
        if messages[0].system_properties.message_type != d.TRANSACTION:
            return False
    elif not any(m.system_properties.message_type == d.TRANSACTION for m in messages):
        return False
    if len(messages) != 1:
        raise V2Error(d.BAD_REQUEST, "a transactional message must be sent alone, not in a batch "
                                     f"of {len(messages)}")
    sp = messages[0].system_properties
    if sp.HasField("delivery_timestamp"):
        raise V2Error(d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                      "a transactional message cannot have a delivery time (delay)")
    if sp.HasField("orphaned_transaction_recovery_duration"):
        duration = sp.orphaned_transaction_recovery_duration
        if duration.seconds < 0 or duration.nanos < 0 or duration.seconds > MAX_IMMUNITY_SECONDS:
            raise V2Error(d.BAD_REQUEST, f"orphaned_transaction_recovery_duration must be within "
                                         f"0..{MAX_IMMUNITY_SECONDS} s")
    return True


def half_message(msg: Message, v2: d.Message) -> Message:
    """The half record of a validated store message whose queue is already picked."""
    props = dict(msg.properties)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PROPERTY_PRODUCER_GROUP] = msg.topic
    props[PROPERTY_TRANSACTION_ID] = props[codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
    sp = v2.system_properties
    if sp.HasField("orphaned_transaction_recovery_duration"):
        props[PROPERTY_CHECK_IMMUNITY_TIME] = str(sp.orphaned_transaction_recovery_duration.seconds)
    return dataclasses.replace(msg, topic=HALF_TOPIC, queue_id=HALF_QUEUE_ID, properties=props,
                               sys_flag=msg.sys_flag & ~SysFlag.TRANSACTION_MASK)


# -- reading half records -----------------------------------------------------------------------
def _int_property(record: MessageRecord, name: str, default: int) -> int:
    raw = record.properties.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("half record at %d: property %s=%r is not an integer", record.physical_offset,
                    name, raw)
        return default


def root_of(record: MessageRecord) -> int:
    """The half queue offset of the transaction's first half record."""
    return _int_property(record, PROPERTY_PREPARED_QUEUE_OFFSET, record.queue_offset)


def check_times(record: MessageRecord) -> int:
    return max(0, _int_property(record, PROPERTY_CHECK_TIMES, 0))


def immunity_ms(record: MessageRecord) -> int:
    """The producer's own wait before the first check (0: none given)."""
    return max(0, _int_property(record, PROPERTY_CHECK_IMMUNITY_TIME, 0)) * 1000


def real_destination(record: MessageRecord) -> tuple[str, int]:
    """(real topic, real queue id) of a half record; MESSAGE_CORRUPTED when it lacks them."""
    topic = record.properties.get(PROPERTY_REAL_TOPIC, "")
    qid = record.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not qid.isdigit():
        raise V2Error(d.MESSAGE_CORRUPTED, f"half record at {record.physical_offset} has no "
                                           f"{PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QUEUE_ID}")
    return topic, int(qid)


def renewed_half(record: MessageRecord, root: int, times: int) -> Message:
    """The copy written when a check is sent (check count `times`)."""
    props = dict(record.properties)
    props[PROPERTY_CHECK_TIMES] = str(times)
    props[PROPERTY_PREPARED_QUEUE_OFFSET] = str(root)
    return Message(topic=HALF_TOPIC, body=record.body, queue_id=HALF_QUEUE_ID, properties=props,
                   flag=record.flag, sys_flag=record.sys_flag & ~_HOST_AND_TX_FLAGS,
                   born_timestamp=record.born_timestamp, born_host=record.born_host,
                   reconsume_times=record.reconsume_times)


_HOST_AND_TX_FLAGS = SysFlag.TRANSACTION_MASK | SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


def committed_message(record: MessageRecord) -> Message:
    """The real message of a half record (RocketMQ's endMessageTransaction)."""
    topic, queue_id = real_destination(record)
    props = {k: v for k, v in record.properties.items() if k not in _HALF_ONLY}
    return Message(topic=topic, body=record.body, queue_id=queue_id, properties=props,
                   flag=record.flag,
                   sys_flag=(record.sys_flag & ~_HOST_AND_TX_FLAGS) | SysFlag.TRANSACTION_COMMIT_TYPE,
                   born_timestamp=record.born_timestamp, born_host=record.born_host,
                   reconsume_times=record.reconsume_times,
                   prepared_transaction_offset=record.physical_offset)


def half_to_v2(record: MessageRecord) -> d.Message:
    """The half record as the producer sent it: a v2 Message of its real topic and queue
    (what RecoverOrphanedTransactionCommand carries to the producer's checker)."""
    topic, queue_id = real_destination(record)
    return record_to_v2(dataclasses.replace(record, topic=topic, queue_id=queue_id))


# -- op records ---------------------------------------------------------------------------------
def op_message(half_queue_offset: int) -> Message:
    return Message(topic=OP_TOPIC, body=str(half_queue_offset).encode("ascii"),
                   queue_id=HALF_QUEUE_ID, properties={codec.PROPERTY_TAGS: REMOVE_TAG})


def op_offsets(record: MessageRecord) -> list[int]:
    """The half queue offsets an op record marks done ([] for another tag or a bad body)."""
    if record.tags != REMOVE_TAG:
        log.warning("op record at %d has tag %r, not %r: ignored", record.physical_offset,
                    record.tags, REMOVE_TAG)
        return []
    out = []
    for part in bytes(record.body).decode("ascii", errors="replace").split(OFFSET_SEPARATOR):
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
        elif part:
            log.warning("op record at %d: %r is not a queue offset", record.physical_offset, part)
    return out


# -- transaction ids ----------------------------------------------------------------------------
_ID_SEPARATOR = "-"
_ID_KIND = "T1"


def transaction_id(key: bytes, offset_msg_id: str, topic: str, message_id: str) -> str:
    """The id a producer gets for the half record at `offset_msg_id` (see the module doc)."""
    return f"{offset_msg_id}{_ID_SEPARATOR}{mac(key, _ID_KIND, offset_msg_id, topic, message_id)}"


def transaction_offset(key: bytes, transaction_id: str, topic: str, message_id: str
                       ) -> tuple[int, str]:
    """(commitlog offset, offset msg id) of a transaction id issued for `topic` and
    `message_id`; INVALID_TRANSACTION_ID when it is malformed, old, forged or another's."""
    text = transaction_id.strip()
    offset_msg_id, separator, check = text.partition(_ID_SEPARATOR)
    if not separator:
        raise V2Error(d.INVALID_TRANSACTION_ID,
                      f"transaction id {transaction_id!r} is not one this server issued (an id "
                      f"without its check, of an earlier version, is no longer accepted)")
    try:
        _, _, offset = codec.decode_offset_msg_id(offset_msg_id)
    except (MessageIllegal, ValueError, OSError) as e:
        raise V2Error(d.INVALID_TRANSACTION_ID,
                      f"transaction id {transaction_id!r} is not one this server issued: {e}") from None
    if not verify(key, check, _ID_KIND, offset_msg_id, topic, message_id):
        raise V2Error(d.INVALID_TRANSACTION_ID,
                      f"transaction id {transaction_id!r} was not issued for topic {topic} and "
                      f"message {message_id} (or was altered)")
    if offset < 0:
        raise V2Error(d.INVALID_TRANSACTION_ID, f"transaction id {transaction_id!r} names a "
                                                f"negative offset")
    return offset, offset_msg_id
