"""The master's side of the wire: the slave's protobuf messages -> `ha.messages` events, and
the master's events -> protobuf. The only place the master maps between the two (the
opposite directions are in slave/wire.py).

Chunk data is handed to protobuf as the same bytes object the session got from the
commitlog; protobuf copies it once into its message, as it did when the session built the
protobuf message itself.
"""
from __future__ import annotations

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
