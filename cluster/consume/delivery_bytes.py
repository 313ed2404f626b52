"""A receive's answer written as protobuf bytes from per-message parts, so the part that does
not depend on the delivery (the record's v2 form) can be built elsewhere: in the conversion
process (conversion_process.py), off the serving process's GIL.

A delivered v2 Message is the record's form plus three fields of its SystemProperties that
only the master knows at delivery: the receipt handle, the delivery attempt and the invisible
duration. `message_parts` splits the record's form into what goes before, inside and after
those fields; `DeliveryFields.message` joins them with the delivery's fields. Every field is written
once (the record's `delivery_attempt` is left out of its part), so the result parses as the
same Message whatever a client's protobuf library does with repeated fields; fields 12, 15 and
16 follow the others inside SystemProperties, which protobuf parsers accept in any order.

    Message (definition.proto)                    bytes
    --------------------------------------------  -------------------------------------------
    1 topic, 2 user_properties                    head            (the record's, serialized)
    3 system_properties (length-delimited):       0x1A varint(len(sp) + len(delivery)), then
        1..11, 13, 14, 17.. of the record         sp              (the record's, serialized)
        12 receipt_handle   string                0x62 varint(len) utf-8
        15 invisible_duration Duration            0x7A varint(len) [0x08 seconds] [0x10 nanos]
        16 delivery_attempt int32                 0x80 0x01 varint(attempt)
    4 body                                        body_field      0x22 varint(len) body

    ReceiveMessagesResponse (batch_receive.proto)  bytes
    --------------------------------------------  -------------------------------------------
    1 status          Status                      0x0A varint(len) Status
    2 delivery_timestamp Timestamp                0x12 varint(len) [0x08 seconds] [0x10 nanos]
    3 messages        repeated Message            0x1A varint(len) Message, per delivery
    4 ack             AckMessageResponse          0x22 varint(len) AckMessageResponse

    ReceiveMessageResponse (service.proto, the v2 stream: one per delivered message)
    --------------------------------------------  -------------------------------------------
    2 message         Message                     0x12 varint(len) Message
"""
from __future__ import annotations

from typing import NamedTuple

from common.varint import decode_varint, encode_varint as varint
from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.codec import MessageRecord

from cluster.v2.convert import record_to_v2


class MessageParts(NamedTuple):
    """The record's v2 form around the delivery's fields (the module's table)."""
    head: bytes
    sp: bytes
    body_field: bytes


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _seconds_nanos(seconds: int, nanos: int) -> bytes:
    """A Timestamp's or Duration's fields (a zero is absent, as protobuf writes it)."""
    return (b"\x08" + varint(seconds) if seconds else b"") + \
        (b"\x10" + varint(nanos) if nanos else b"")


def message_parts(record: MessageRecord) -> MessageParts:
    """The record's delivered form (convert.record_to_v2) without the delivery's fields:
    serialized once and cut at its fields (written in field order, topic first)."""
    message = record_to_v2(record)
    message.system_properties.ClearField("delivery_attempt")
    data = message.SerializeToString()
    pos, end, cuts = 0, len(data), {}
    while pos < end:  # each top-level field: tag byte (fields 1-4), varint length, payload
        tag = data[pos]
        length, start = decode_varint(data, pos + 1)
        cuts[tag] = (pos, start, start + length)
        pos = start + length
    sp_at = cuts.get(0x1A)
    if sp_at is None:  # record_to_v2 always sets some system property
        raise ValueError("a delivered message without system properties")
    return MessageParts(data[:sp_at[0]], data[sp_at[1]:sp_at[2]], data[sp_at[2]:])


class DeliveryFields:
    """The delivery's fields of one answer's messages (its invisible duration is the same for
    all of them, so it is encoded once)."""

    __slots__ = ("invisible",)

    def __init__(self, invisible_ms: int) -> None:
        self.invisible = _field(b"\x7A", _seconds_nanos(invisible_ms // 1000,
                                                        invisible_ms % 1000 * 1_000_000))

    def message(self, parts: MessageParts, handle: str, attempt: int) -> bytes:
        """The delivered Message: its record's parts with the delivery's receipt handle,
        attempt and invisible duration."""
        handle_bytes = handle.encode()
        delivery = b"".join((b"\x62", varint(len(handle_bytes)), handle_bytes, self.invisible,
                             b"\x80\x01", varint(attempt)))
        head, sp, body_field = parts
        return b"".join((head, b"\x1A", varint(len(sp) + len(delivery)), sp, delivery,
                         body_field))


def delivered_message(parts: MessageParts, handle: str, attempt: int,
                      invisible_ms: int) -> bytes:
    """DeliveryFields(invisible_ms).message(parts, handle, attempt)."""
    return DeliveryFields(invisible_ms).message(parts, handle, attempt)


class _Parsed:
    """A response kept as its bytes: the server sends `SerializeToString()`; a reader of its
    fields in this process (the router, tests) gets them from the message parsed once."""

    __slots__ = ("_parsed",)
    RESPONSE: type

    def __init__(self) -> None:
        self._parsed = None

    @property
    def parsed(self):
        if self._parsed is None:
            self._parsed = self.RESPONSE.FromString(self.SerializeToString())
        return self._parsed

    def __getattr__(self, name: str):
        # the parsed message's fields and methods (messages, HasField, ...) for in-process
        # readers; never reached on the server's path, which only serializes
        return getattr(self.parsed, name)


class EncodedMessageResponse(_Parsed):
    """A v2 stream's ReceiveMessageResponse carrying one delivered Message's bytes."""

    __slots__ = ("message_bytes",)
    RESPONSE = s.ReceiveMessageResponse

    def __init__(self, message_bytes: bytes) -> None:
        super().__init__()
        self.message_bytes = message_bytes

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's name: the serializer's)
        return _field(b"\x12", self.message_bytes)


class EncodedAnswer(_Parsed):
    """A ReceiveMessagesResponse kept as its bytes: status, delivery timestamp and the
    delivered messages' bytes (DeliveryFields.message), plus the AckAndReceive `ack` when
    set."""

    __slots__ = ("status", "timestamp_ms", "messages_bytes", "_ack")
    RESPONSE = br.ReceiveMessagesResponse

    def __init__(self, status: d.Status, timestamp_ms: int, messages_bytes: list[bytes]
                 ) -> None:
        super().__init__()
        self.status = status
        self.timestamp_ms = timestamp_ms
        self.messages_bytes = messages_bytes
        self._ack: bytes = b""
        self._parsed: br.ReceiveMessagesResponse | None = None

    def set_ack(self, ack) -> None:
        """The AckAndReceive answer's `ack` (an AckMessageResponse)."""
        self._ack = _field(b"\x22", ack.SerializeToString())
        self._parsed = None

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's name: the serializer's)
        ms = self.timestamp_ms
        parts = [_field(b"\x0A", self.status.SerializeToString()),
                 _field(b"\x12", _seconds_nanos(ms // 1000, ms % 1000 * 1_000_000))]
        for message in self.messages_bytes:
            parts += (b"\x1A", varint(len(message)), message)
        parts.append(self._ack)
        return b"".join(parts)


def set_ack(answer: "br.ReceiveMessagesResponse | EncodedAnswer", ack) -> None:
    """Set an AckAndReceive answer's `ack`, whichever form the answer has."""
    if isinstance(answer, EncodedAnswer):
        answer.set_ack(ack)
    else:
        answer.ack.CopyFrom(ack)
