"""The slave's side of the wire: the slave's `ha.messages` events -> protobuf, and the
master's protobuf messages -> events. The only place the slave maps between the two (the
opposite directions are in master/master_wire.py).

A Chunk is decoded without protobuf (`decode_master`, the stream's response deserializer):
its data is sliced out of the received bytes once, and the event, the CRC check and the append
share that bytes object. Parsing the message copied the data into protobuf's arena and reading
the field copied it again. Anything else, or a chunk with fields this decoder does not know,
goes through protobuf as before.
"""
from __future__ import annotations

from common.varint import decode_varint as _varint
from ha.messages import (Ack, Chunk, Hello, MalformedMessage, MasterMessage, Nack, SlaveMessage,
                         Welcome, epoch_entries)
from proto import replication_pb2 as pb


def to_master(msg: SlaveMessage) -> pb.SlaveMessage:
    if isinstance(msg, Ack):  # first: the common case, after every chunk
        return pb.SlaveMessage(ack=pb.Ack(max_offset=msg.max_offset,
                                          flushed_offset=msg.flushed_offset))
    if isinstance(msg, Hello):
        return pb.SlaveMessage(hello=pb.Hello(
            node_id=msg.node_id, broker_name=msg.broker_name, max_offset=msg.max_offset,
            min_offset=msg.min_offset,
            epochs=[pb.EpochEntry(epoch=e.epoch, start_offset=e.start_offset) for e in msg.epochs],
            sync_from_last_file=msg.sync_from_last_file))
    if isinstance(msg, Nack):
        return pb.SlaveMessage(nack=pb.Nack(offset=msg.offset, reason=msg.reason))
    raise TypeError(f"not a slave message: {msg!r}")


_VARINT_FIELDS = {0x08: "offset", 0x18: "epoch", 0x20: "epoch_start_offset",
                  0x28: "confirm_offset", 0x30: "master_max_offset", 0x38: "crc32c"}


def _chunk(raw: bytes) -> Chunk | None:
    """The Chunk of a serialized MasterMessage holding only a chunk, or None (not one, or
    fields outside Chunk's): decoded as protobuf would (last value wins, int64 and int32 from
    two's complement, crc32c as uint32)."""
    if not raw or raw[0] != 0x12:
        return None
    size, pos = _varint(raw, 1)
    if pos + size != len(raw):
        return None
    fields = {"offset": 0, "epoch": 0, "epoch_start_offset": 0, "confirm_offset": 0,
              "master_max_offset": 0, "crc32c": 0}
    data = b""
    end = len(raw)
    while pos < end:
        tag = raw[pos]
        if tag == 0x12:
            n, pos = _varint(raw, pos + 1)
            if pos + n > end:
                return None
            data = raw[pos:pos + n]
            pos += n
            continue
        name = _VARINT_FIELDS.get(tag)
        if name is None:
            return None
        value, pos = _varint(raw, pos + 1)
        if name == "crc32c":
            value &= 0xFFFFFFFF
        elif name == "epoch":
            value &= 0xFFFFFFFF
            value -= (value >> 31) << 32
        elif value >> 63:
            value -= 1 << 64
        fields[name] = value
    if pos != end:
        return None
    return Chunk(data=data, **fields)


def decode_master(raw: bytes) -> "Chunk | pb.MasterMessage":
    """The stream's response deserializer: a chunk as an event, anything else as protobuf."""
    try:
        chunk = _chunk(raw)
    except (IndexError, ValueError):  # VarintError included: protobuf reports it
        chunk = None
    return chunk if chunk is not None else pb.MasterMessage.FromString(raw)


def from_master(msg: "pb.MasterMessage | Chunk") -> MasterMessage:
    """Raises MalformedMessage for a message without a body or with an impossible epoch."""
    if isinstance(msg, Chunk):  # decoded by decode_master already
        return msg
    kind = msg.WhichOneof("body")
    if kind == "chunk":
        c = msg.chunk
        return Chunk(offset=c.offset, data=c.data, epoch=c.epoch,
                     epoch_start_offset=c.epoch_start_offset, confirm_offset=c.confirm_offset,
                     master_max_offset=c.master_max_offset, crc32c=c.crc32c)
    if kind == "welcome":
        w = msg.welcome
        epochs = epoch_entries(((e.epoch, e.start_offset) for e in w.epochs), "master")
        return Welcome(epoch=w.epoch, epochs=epochs, start_offset=w.start_offset,
                       master_min_offset=w.master_min_offset,
                       master_max_offset=w.master_max_offset, confirm_offset=w.confirm_offset)
    raise MalformedMessage(f"unknown message from the master: {kind!r}")
