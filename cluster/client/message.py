"""The client's message model and its mapping onto apache.rocketmq.v2.Message.

Message ids are made like rocketmq-python-client 5.1.2 makes them (MessageIdCodec, version V1),
so the ids in our stores look the same whichever client produced them: 34 uppercase hex chars,

    "01" | MAC address (6 bytes) | pid (low 2 bytes) | seconds since 2021-01-01 UTC (low 4
    bytes) | sequence number (4 bytes, big endian, per process)

The id is given when a message is first converted for sending and kept across retries, so a
message resent after an ambiguous failure keeps its UNIQ_KEY (consumers can drop duplicates).

Message types follow the official client: a message_group makes it FIFO, else a delivery time
makes it DELAY, else NORMAL. born_timestamp is sent with millisecond precision; born_host is
left empty and filled by the server from the connection's address.
"""
from __future__ import annotations

import gzip
import itertools
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from proto.apache.rocketmq.v2 import definition_pb2 as d

_EPOCH_2021 = 1609459200  # 2021-01-01T00:00:00Z


class MessageIdGenerator:
    """Official-client-compatible V1 message ids. Thread-safe (itertools.count under the GIL)."""

    def __init__(self, mac: int | None = None, pid: int | None = None) -> None:
        mac = uuid.getnode() if mac is None else mac
        pid = os.getpid() if pid is None else pid
        self._prefix = "01" + (mac.to_bytes(6, "big") + (pid & 0xFFFF).to_bytes(2, "big")).hex().upper()
        self._seq = itertools.count()
        self._pid = pid

    def next_id(self) -> str:
        seconds = (int(time.time()) - _EPOCH_2021) & 0xFFFFFFFF
        seq = next(self._seq) & 0xFFFFFFFF
        return f"{self._prefix}{seconds:08X}{seq:08X}"


_generator: MessageIdGenerator | None = None
_generator_lock = threading.Lock()


def next_message_id() -> str:
    """A fresh id from the process-wide generator (rebuilt after a fork: the pid is in it)."""
    global _generator
    gen = _generator
    if gen is None or gen._pid != os.getpid():
        with _generator_lock:
            if _generator is None or _generator._pid != os.getpid():
                _generator = MessageIdGenerator()
            gen = _generator
    return gen.next_id()


def _keys(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(value)


@dataclass
class Message:
    """What a producer sends. `keys` accepts one string or several; `message_id` is filled when
    the message is sent (or may be set by the caller)."""
    topic: str
    body: bytes
    tag: str | None = None
    keys: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    message_id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError("a message needs a topic")
        if isinstance(self.body, str):
            raise TypeError("body must be bytes (encode the text first)")
        self.body = bytes(self.body)
        self.keys = _keys(self.keys)

    @property
    def message_type(self) -> int:
        if self.message_group:
            return d.FIFO
        if self.delivery_timestamp_ms:
            return d.DELAY
        return d.NORMAL


@dataclass
class ReceivedMessage(Message):
    """A delivered message: what was sent plus where and when it was stored, and for a
    SimpleConsumer the receipt handle that acks it."""
    queue_id: int = 0
    queue_offset: int = 0
    born_timestamp_ms: int = 0
    store_timestamp_ms: int = 0
    born_host: str = ""
    store_host: str = ""
    delivery_attempt: int = 1
    receipt_handle: str = ""
    invisible_duration_ms: int = 0


@dataclass(frozen=True)
class SendReceipt:
    """One stored message: its id (UNIQ_KEY) and queue offset. The server chooses the queue and
    does not report it (SendResultEntry has no queue id)."""
    message_id: str
    offset: int
    transaction_id: str = ""


def _ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def to_v2(msg: Message, namespace: str = "", now_ms: int | None = None,
          out: d.Message | None = None) -> d.Message:
    """The wire form (filled into `out`, e.g. `request.messages.add()`, which saves copying
    every message into the request); gives the message its id if it has none."""
    if not msg.message_id:
        msg.message_id = next_message_id()
    if out is None:
        out = d.Message()
    out.body = msg.body
    topic = out.topic
    topic.name = msg.topic
    if namespace:
        topic.resource_namespace = namespace
    sp = out.system_properties
    sp.message_id = msg.message_id
    sp.message_type = msg.message_type
    sp.body_encoding = d.IDENTITY
    if msg.tag:
        sp.tag = msg.tag
    if msg.keys:
        sp.keys.extend(msg.keys)
    if msg.message_group:
        sp.message_group = msg.message_group
    if msg.delivery_timestamp_ms:
        ms = msg.delivery_timestamp_ms
        ts = sp.delivery_timestamp
        ts.seconds, ts.nanos = ms // 1000, ms % 1000 * 1_000_000
    born = int(time.time() * 1000) if now_ms is None else now_ms
    ts = sp.born_timestamp
    ts.seconds, ts.nanos = born // 1000, born % 1000 * 1_000_000
    if msg.properties:
        out.user_properties.update(msg.properties)
    return out


def from_v2(m: d.Message) -> ReceivedMessage:
    sp = m.system_properties
    body = m.body
    if sp.body_encoding == d.GZIP:  # servers may compress; ours sends IDENTITY
        body = gzip.decompress(body)
    return ReceivedMessage(
        topic=m.topic.name, body=body, tag=sp.tag if sp.HasField("tag") else None,
        keys=tuple(sp.keys), properties=dict(m.user_properties),
        message_group=sp.message_group if sp.HasField("message_group") else None,
        delivery_timestamp_ms=_ms(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None,
        message_id=sp.message_id, queue_id=sp.queue_id, queue_offset=sp.queue_offset,
        born_timestamp_ms=_ms(sp.born_timestamp), store_timestamp_ms=_ms(sp.store_timestamp),
        born_host=sp.born_host, store_host=sp.store_host, delivery_attempt=sp.delivery_attempt,
        receipt_handle=sp.receipt_handle,
        invisible_duration_ms=(sp.invisible_duration.seconds * 1000
                               + sp.invisible_duration.nanos // 1_000_000))


def receipts_of(entries: Sequence) -> list[SendReceipt]:
    return [SendReceipt(e.message_id, e.offset, e.transaction_id) for e in entries]
