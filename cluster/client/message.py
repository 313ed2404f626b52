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

    def next_id(self) -> str:
        seconds = (int(time.time()) - _EPOCH_2021) & 0xFFFFFFFF
        seq = next(self._seq) & 0xFFFFFFFF
        return f"{self._prefix}{seconds:08X}{seq:08X}"


_generator: MessageIdGenerator | None = None
_generator_lock = threading.Lock()


def _forget_generator() -> None:
    global _generator, _generator_lock
    _generator, _generator_lock = None, threading.Lock()


# The pid is in the id: a forked child builds its own generator. Told by fork itself rather
# than by a getpid() per message (a system call for each message of every batch).
os.register_at_fork(after_in_child=_forget_generator)


def next_message_id() -> str:
    """A fresh id from the process-wide generator (rebuilt after a fork: the pid is in it)."""
    global _generator
    gen = _generator
    if gen is None:
        with _generator_lock:
            if _generator is None:
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


def _body(m: d.Message) -> bytes:
    if m.system_properties.body_encoding == d.GZIP:  # servers may compress; ours sends IDENTITY
        return gzip.decompress(m.body)
    return m.body


def _optional(name: str, convert=lambda v: v):
    """A system property that may be absent (None then)."""
    def read(m: d.Message):
        sp = m.system_properties
        return convert(getattr(sp, name)) if sp.HasField(name) else None
    return read


# Each field of a ReceivedMessage read from its wire form (apache.rocketmq.v2.Message).
_FROM_WIRE = {
    "topic": lambda m: m.topic.name,
    "body": _body,
    "tag": _optional("tag"),
    "keys": lambda m: tuple(m.system_properties.keys),
    "properties": lambda m: dict(m.user_properties),
    "message_group": _optional("message_group"),
    "delivery_timestamp_ms": _optional("delivery_timestamp", _ms),
    "message_id": lambda m: m.system_properties.message_id,
    "queue_id": lambda m: m.system_properties.queue_id,
    "queue_offset": lambda m: m.system_properties.queue_offset,
    "born_timestamp_ms": lambda m: _ms(m.system_properties.born_timestamp),
    "store_timestamp_ms": lambda m: _ms(m.system_properties.store_timestamp),
    "born_host": lambda m: m.system_properties.born_host,
    "store_host": lambda m: m.system_properties.store_host,
    "delivery_attempt": lambda m: m.system_properties.delivery_attempt,
    "receipt_handle": lambda m: m.system_properties.receipt_handle,
    "invisible_duration_ms": lambda m: _ms(m.system_properties.invisible_duration),
}
assert set(_FROM_WIRE) == set(ReceivedMessage.__dataclass_fields__)


class _WireMessage(ReceivedMessage):
    """A ReceivedMessage that reads each field from its wire message when first asked for it,
    then keeps it (a plain attribute from then on: set, compared and printed as any other).

    Why: reading all 17 fields of a delivery out of protobuf cost the consumer about 10 µs a
    message (docs/performance/history.md, "The consumer's own Python"), most of it for fields a
    consumer loop never looks at; an ack needs only the topic, id and receipt handle. The
    wire message (and with it its whole response) stays in memory as long as the message
    does; pickling leaves it behind."""

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in _FROM_WIRE)

    def __eq__(self, other: object) -> bool:  # equal to a ReceivedMessage with the same fields
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return self._fields() == tuple(getattr(other, name) for name in _FROM_WIRE)

    __hash__ = None  # mutable, as ReceivedMessage

    def __repr__(self) -> str:
        return ReceivedMessage.__repr__(self).replace(type(self).__qualname__,
                                                      ReceivedMessage.__qualname__, 1)

    def __getstate__(self) -> dict:  # pickled whole: every field read, the wire left behind
        return dict(zip(_FROM_WIRE, self._fields()))

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class _FromWire:
    """A field of _WireMessage: read from the wire on first use and kept in the instance's
    __dict__, where later reads find it first (a non-data descriptor, as cached_property, but
    without the lock Python 3.11's takes on every first read)."""
    __slots__ = ("name", "read")

    def __init__(self, name: str, read) -> None:
        self.name = name
        self.read = read

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.read(obj.__dict__["_wire"])
        return value


for _name, _read in _FROM_WIRE.items():
    setattr(_WireMessage, _name, _FromWire(_name, _read))
del _name, _read
_new = object.__new__


def from_v2(m: d.Message) -> ReceivedMessage:
    """The delivered message `m` as a ReceivedMessage, each field read from `m` when first
    used (_WireMessage)."""
    msg = _new(_WireMessage)
    msg.__dict__["_wire"] = m
    return msg


def receipts_of(entries: Sequence) -> list[SendReceipt]:
    return [SendReceipt(e.message_id, e.offset, e.transaction_id) for e in entries]
