"""The master's side of the wire: the slave's protobuf messages -> `ha.messages` events, and
the master's events -> protobuf. The only place the master maps between the two (the
opposite directions are in slave/slave_wire.py).

A Chunk is not built as a protobuf message: `encode_chunk` writes the serialized
MasterMessage itself (protobuf serializes the small header fields, the data is joined after
them as field 2), so its data is copied once, into the bytes gRPC sends. Building the message
copied it twice (three times through keyword arguments) and serializing once more: about
1 ms per MiB of the builder's time, which bounded catch-up replication. The response serializer
of the stream (`serialize`) passes such bytes through and serializes anything else.
"""
from __future__ import annotations

from common.varint import encode_varint as _varint
from ha.messages import (Ack, Chunk, Hello, MalformedMessage, MasterMessage, Nack, SlaveMessage,
                         Welcome, epoch_entries)
from proto import replication_pb2 as pb


def from_slave(msg: pb.SlaveMessage) -> SlaveMessage:
    """Raises MalformedMessage for a message without a body or with an impossible epoch."""
    kind = msg.WhichOneof("body")
    if kind == "ack":  # first: the common case, after every chunk
        a = msg.ack
        return Ack(max_offset=a.max_offset, flushed_offset=a.flushed_offset)
    if kind == "hello":
        h = msg.hello
        epochs = epoch_entries(((e.epoch, e.start_offset) for e in h.epochs),
                               f"slave {h.node_id or '?'}")
        return Hello(node_id=h.node_id, broker_name=h.broker_name, max_offset=h.max_offset,
                     min_offset=h.min_offset, epochs=epochs,
                     sync_from_last_file=h.sync_from_last_file)
    if kind == "nack":
        n = msg.nack
        return Nack(offset=n.offset, reason=n.reason)
    raise MalformedMessage(f"unknown message from the slave: {kind!r}")


_CHUNK_FIELD = b"\x12"  # MasterMessage.chunk: field 2, length-delimited
_DATA_FIELD = b"\x12"  # Chunk.data: field 2, length-delimited


def encode_chunk(msg: Chunk) -> bytes:
    """The serialized MasterMessage holding `msg`: what `to_slave(msg).SerializeToString()`
    parses back to (tests/master/test_master_wire.py), built with one copy of the data. Fields
    may come in any order on the wire; the data comes last, and is omitted when empty, as
    proto3 does."""
    header = pb.Chunk(offset=msg.offset, epoch=msg.epoch,
                      epoch_start_offset=msg.epoch_start_offset,
                      confirm_offset=msg.confirm_offset,
                      master_max_offset=msg.master_max_offset,
                      crc32c=msg.crc32c).SerializeToString()
    data = msg.data
    if not data:
        return b"".join((_CHUNK_FIELD, _varint(len(header)), header))
    length = _varint(len(data))
    inner = len(header) + 1 + len(length) + len(data)
    return b"".join((_CHUNK_FIELD, _varint(inner), header, _DATA_FIELD, length, data))


def serialize(msg: "pb.MasterMessage | bytes") -> bytes:
    """The stream's response serializer: an encoded chunk as it is, a message serialized."""
    return msg if isinstance(msg, bytes) else msg.SerializeToString()


def to_slave_wire(msg: MasterMessage) -> "pb.MasterMessage | bytes":
    """What the stream yields for `msg`: a Chunk already serialized, a Welcome as a message."""
    return encode_chunk(msg) if isinstance(msg, Chunk) else to_slave(msg)


def to_slave(msg: MasterMessage) -> pb.MasterMessage:
    if isinstance(msg, Chunk):
        return pb.MasterMessage(chunk=pb.Chunk(
            offset=msg.offset, data=msg.data, epoch=msg.epoch,
            epoch_start_offset=msg.epoch_start_offset, confirm_offset=msg.confirm_offset,
            master_max_offset=msg.master_max_offset, crc32c=msg.crc32c))
    if isinstance(msg, Welcome):
        return pb.MasterMessage(welcome=pb.Welcome(
            epoch=msg.epoch,
            epochs=[pb.EpochEntry(epoch=e.epoch, start_offset=e.start_offset) for e in msg.epochs],
            start_offset=msg.start_offset, master_min_offset=msg.master_min_offset,
            master_max_offset=msg.master_max_offset, confirm_offset=msg.confirm_offset))
    raise TypeError(f"not a master message: {msg!r}")
