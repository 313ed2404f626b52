"""A SendMessage batch checked and encoded for the store, whose queue the master already chose:
the CPU-bound half of a send, as a plain function of its inputs, so a node can run it in its
encode process (encode_process.py) while its serving process appends and answers.

    v2 messages -> to_store_messages (convert.py) -> queue id -> put_encoding.encode_messages
                -> EncodedSend: message ids, body bytes, records (with dispatch hints), or the
                   store's refusal

It gives the records `Sender.send` would put for the same request and queue, byte for byte
(tests/messaging/test_send_encoding.py). `pack` / `unpack` carry an EncodedSend over the
encode pipe as plain values (marshal), all records in one bytes object:

    (topic, message_ids, body_bytes, blob, rows, refusal)
    rows:    one per record, in order: (topic, queue_id, size, store_timestamp_pos, prop_crc,
             transaction_type, sys_flag, properties_text, hint); the record is the next `size`
             bytes of `blob`
    hint:    None (reput decodes the record) or (tags_code, keys, uniq_key,
             prepared_transaction_offset)
    refusal: None or (PutStatus value, reason)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store import codec
from store.codec import EncodedRecord
from store.dispatch import DispatchRequest
from store.put_encoding import Encoded, EncodeSettings, TopicCache, encode_messages
from store.put_result import PutResult, PutStatus

from cluster.messaging.convert import SendLimits, to_store_messages
from cluster.messaging.transaction_records import check_transactional_send
from cluster.messaging.v2_status import V2Error


@dataclass
class EncodedSend:
    """One request's messages, ready for `MasterRole.put_encoded` (or the store's refusal of
    them, which the master answers after its own checks, as `Sender.send` orders them)."""

    topic: str
    message_ids: list[str]
    body_bytes: int  # the batch's bodies (maxMessageSize bounds a batch's sum)
    encoded: list[Encoded]
    refusal: PutResult | None


def encode_send(messages: Sequence[d.Message], queue_id: int, limits: SendLimits, now_ms: int,
                peer_ip: str, settings: EncodeSettings, topics: TopicCache) -> EncodedSend:
    """Raises V2Error for what `Sender.send` refuses before it picks a queue."""
    if check_transactional_send(messages):
        # alone in its request, and a half message is more than an append (Sender.prepare)
        raise V2Error(d.BAD_REQUEST, "a transactional message is not encoded ahead")
    topic, msgs = to_store_messages(messages, limits, now_ms, peer_ip)
    for m in msgs:
        m.queue_id = queue_id
    encoded, refusal = encode_messages(msgs, settings, lambda: now_ms, topics)
    uniq = codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    return EncodedSend(topic, [m.properties[uniq] for m in msgs],
                       sum(len(m.body) for m in msgs), encoded, refusal)


def pack(sent: EncodedSend) -> tuple:
    rows = []
    for record, topic, queue_id in sent.encoded:
        h = record.hint
        rows.append((topic, queue_id, len(record.data), record.store_timestamp_pos,
                     record.prop_crc, record.transaction_type, record.sys_flag,
                     record.properties_text,
                     None if h is None else (h.tags_code, h.keys, h.uniq_key,
                                             h.prepared_transaction_offset)))
    blob = b"".join(bytes(record.data) for record, _, _ in sent.encoded)
    refusal = sent.refusal
    return (sent.topic, sent.message_ids, sent.body_bytes, blob, rows,
            None if refusal is None else (refusal.status.value, refusal.reason))


def unpack(values: tuple) -> EncodedSend:
    """The EncodedSend `pack` carried: each record a writable view into one buffer (the put
    lock patches its offsets in place, CommitLog._append_locked)."""
    topic, message_ids, body_bytes, blob, rows, refusal = values
    buf = memoryview(bytearray(blob))
    encoded: list[Encoded] = []
    pos = 0
    for rtopic, queue_id, size, ts_pos, prop_crc, tran_type, sys_flag, text, hint in rows:
        record = EncodedRecord(buf[pos:pos + size], ts_pos, prop_crc, tran_type, sys_flag, text)
        if hint is not None:
            tags_code, keys, uniq_key, pto = hint
            record.hint = DispatchRequest(rtopic, queue_id, 0, 0, tags_code, 0, 0, keys, uniq_key,
                                          sys_flag, pto, text)
        encoded.append((record, rtopic, queue_id))
        pos += size
    if pos != len(buf):
        raise ValueError(f"an encoded send of {len(buf)} bytes whose records take {pos}")
    return EncodedSend(topic, message_ids, body_bytes, encoded,
                       None if refusal is None else PutResult(PutStatus(refusal[0]),
                                                              reason=refusal[1]))
