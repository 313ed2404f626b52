"""slave/slave_wire.py: the slave's events -> protobuf and the master's protobuf messages ->
events, every field of every message, through serialized bytes."""
from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from common.varint import encode_varint
from ha.messages import Ack, Chunk, MalformedMessage, Welcome
from proto import replication_pb2 as pb
from slave import slave_wire as wire
from tests.replication_messages import CHUNKS, MASTER_MESSAGES, SLAVE_MESSAGES, reference_pb, through_bytes


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


def _decoded(raw: bytes):
    return wire.from_master(wire.decode_master(raw))


@given(MASTER_MESSAGES)
def test_what_the_stream_receives_decodes_to_the_same_event(event):
    """decode_master (chunks without protobuf) agrees with protobuf on every field."""
    assert _decoded(reference_pb(event).SerializeToString()) == event


@given(CHUNKS, st.permutations(range(7)), st.booleans())
def test_chunk_fields_in_any_order_and_repeated_decode_as_protobuf_does(event, order, repeat):
    fields = [pb.Chunk(**{name: getattr(event, name)}).SerializeToString()
              for name in ("offset", "data", "epoch", "epoch_start_offset", "confirm_offset",
                           "master_max_offset", "crc32c")]
    inner = b"".join(fields[i] for i in order)
    if repeat:  # a repeated scalar: the last value wins
        inner += pb.Chunk(offset=12345, data=b"last").SerializeToString()
    raw = b"\x12" + encode_varint(len(inner)) + inner
    assert _decoded(raw) == wire.from_master(pb.MasterMessage.FromString(raw))


def test_a_chunk_with_an_unknown_field_goes_through_protobuf():
    inner = pb.Chunk(offset=7, data=b"abc").SerializeToString() + b"\x40\x01"  # field 8
    raw = b"\x12" + encode_varint(len(inner)) + inner
    assert isinstance(wire.decode_master(raw), pb.MasterMessage)
    assert _decoded(raw) == wire.from_master(pb.MasterMessage.FromString(raw))


def test_a_truncated_chunk_is_refused_as_protobuf_refuses_it():
    raw = pb.MasterMessage(chunk=pb.Chunk(offset=7, data=b"abcdef")).SerializeToString()
    with pytest.raises(DecodeError):
        wire.decode_master(raw[:-2])
