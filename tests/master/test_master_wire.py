"""master/master_wire.py: the slave's protobuf messages -> events and the master's events ->
protobuf, every field of every message, through serialized bytes."""
from __future__ import annotations

import pytest
from hypothesis import given

from ha.epoch import EpochEntry
from ha.messages import Hello, MalformedMessage, Welcome
from master import master_wire as wire
from proto import replication_pb2 as pb
from tests.replication_messages import MASTER_MESSAGES, SLAVE_MESSAGES, reference_pb, through_bytes


@given(SLAVE_MESSAGES)
def test_every_slave_message_field_is_decoded(event):
    assert wire.from_slave(through_bytes(reference_pb(event))) == event


@given(MASTER_MESSAGES)
def test_every_master_message_field_is_encoded(event):
    msg = wire.to_slave(event)
    assert msg == reference_pb(event)
    assert through_bytes(msg) == msg


@given(MASTER_MESSAGES)
def test_what_the_stream_sends_parses_to_the_same_message(event):
    """An encoded chunk (bytes written without protobuf) parses to the reference message."""
    sent = wire.serialize(wire.to_slave_wire(event))
    assert pb.MasterMessage.FromString(sent) == reference_pb(event)


def test_a_large_chunk_is_encoded_with_multi_byte_lengths():
    from ha.messages import Chunk
    chunk = Chunk(offset=1 << 40, data=bytes(range(256)) * 4096, epoch=7,
                  epoch_start_offset=1 << 33, confirm_offset=5, master_max_offset=1 << 41,
                  crc32c=0xFFFFFFFF)
    assert pb.MasterMessage.FromString(wire.encode_chunk(chunk)) == reference_pb(chunk)


def test_welcome_epochs_keep_their_order():
    entries = (EpochEntry(1, 0), EpochEntry(3, 100), EpochEntry(4, 100))
    msg = wire.to_slave(Welcome(4, entries, 100, 0, 200, 150))
    assert [(e.epoch, e.start_offset) for e in msg.welcome.epochs] == [(1, 0), (3, 100), (4, 100)]


@pytest.mark.parametrize("msg, reason", [
    (pb.SlaveMessage(), "unknown message from the slave: None"),
    (pb.SlaveMessage(hello=pb.Hello(node_id="broker-a:1", epochs=[pb.EpochEntry(epoch=0)])),
     "slave broker-a:1 sent invalid epochs: epoch 0 is not an integer in [1, 2147483647]"),
    (pb.SlaveMessage(hello=pb.Hello(epochs=[pb.EpochEntry(epoch=1, start_offset=-1)])),
     "slave ? sent invalid epochs: start_offset -1"),
])
def test_messages_that_cannot_be_events_are_malformed(msg, reason):
    with pytest.raises(MalformedMessage) as raised:
        wire.from_slave(through_bytes(msg))
    assert str(raised.value).startswith(reason)


def test_an_empty_hello_is_a_hello_of_zeros():  # proto3: a zero on the wire is a zero here
    assert wire.from_slave(pb.SlaveMessage(hello=pb.Hello())) == Hello("", "", 0, 0, (), False)


def test_only_master_messages_are_encoded():
    with pytest.raises(TypeError, match="not a master message"):
        wire.to_slave(Hello("", "", 0, 0, (), False))  # type: ignore[arg-type]
