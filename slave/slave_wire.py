"""The slave's side of the wire: the slave's `ha.messages` events -> protobuf, and the
master's protobuf messages -> events. The only place the slave maps between the two (the
opposite directions are in master/wire.py).

Chunk data is read out of the protobuf message once; the event, the CRC check and the append
then share that one bytes object.
"""
from __future__ import annotations

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


def from_master(msg: pb.MasterMessage) -> MasterMessage:
    """Raises MalformedMessage for a message without a body or with an impossible epoch."""
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
