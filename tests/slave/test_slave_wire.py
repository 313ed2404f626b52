"""slave/wire.py: the slave's events -> protobuf and the master's protobuf messages -> events,
every field of every message, through serialized bytes."""
from __future__ import annotations

import pytest
from hypothesis import given

from ha.messages import Ack, Chunk, MalformedMessage, Welcome
from proto import replication_pb2 as pb
from slave import slave_wire as wire
from tests.replication_messages import MASTER_MESSAGES, SLAVE_MESSAGES, reference_pb, through_bytes


@given(SLAVE_MESSAGES)
def test_every_slave_message_field_is_encoded(event):
    msg = wire.to_master(event)
    assert msg == reference_pb(event)
    assert through_bytes(msg) == msg


@given(MASTER_MESSAGES)
def test_every_master_message_field_is_decoded(event):
    assert wire.from_master(through_bytes(reference_pb(event))) == event


def test_a_chunk_of_a_mib_arrives_whole():
    data = bytes(range(256)) * 4096
    msg = pb.MasterMessage(chunk=pb.Chunk(offset=1 << 40, data=data, crc32c=(1 << 32) - 1))
    chunk = wire.from_master(through_bytes(msg))
    assert isinstance(chunk, Chunk) and chunk.data == data and chunk.crc32c == (1 << 32) - 1


@pytest.mark.parametrize("msg, reason", [
    (pb.MasterMessage(), "unknown message from the master: None"),
    (pb.MasterMessage(welcome=pb.Welcome(epoch=1, epochs=[pb.EpochEntry(epoch=-1)])),
     "master sent invalid epochs: epoch -1 is not an integer"),
])
def test_messages_that_cannot_be_events_are_malformed(msg, reason):
    with pytest.raises(MalformedMessage) as raised:
        wire.from_master(through_bytes(msg))
    assert str(raised.value).startswith(reason)


def test_an_empty_welcome_is_a_welcome_of_zeros():  # the session refuses it, not the wire
    assert wire.from_master(pb.MasterMessage(welcome=pb.Welcome())) == Welcome(0, (), 0, 0, 0, 0)


def test_only_slave_messages_are_encoded():
    with pytest.raises(TypeError, match="not a slave message"):
        wire.to_master(Welcome(0, (), 0, 0, 0, 0))  # type: ignore[arg-type]
    assert wire.to_master(Ack(5, 3)) == pb.SlaveMessage(ack=pb.Ack(max_offset=5, flushed_offset=3))
