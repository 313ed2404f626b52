"""ha.messages: one event per protocol message, with exactly the proto message's fields, and
ha/ free of generated protobuf and gRPC."""
from __future__ import annotations

import ast
import dataclasses
import pathlib
import typing

import pytest

import ha
from ha.epoch import EpochEntry
from ha.messages import Chunk, MalformedMessage, MasterMessage, SlaveMessage, epoch_entries
from proto import replication_pb2 as pb
from tests.replication_messages import PROTO


@pytest.mark.parametrize("event", list(PROTO), ids=lambda c: c.__name__)
def test_each_event_has_the_fields_of_its_proto_message_in_order(event):
    proto_class = PROTO[event][0]
    assert [f.name for f in dataclasses.fields(event)] == [
        f.name for f in proto_class.DESCRIPTOR.fields]
    assert event.__dataclass_params__.frozen


@pytest.mark.parametrize("union, envelope", [(SlaveMessage, pb.SlaveMessage),
                                             (MasterMessage, pb.MasterMessage)])
def test_the_unions_are_the_envelopes_oneofs(union, envelope):
    body = envelope.DESCRIPTOR.oneofs_by_name["body"]
    assert [PROTO[c][1] for c in typing.get_args(union)] == [f.name for f in body.fields]
    assert [PROTO[c][0].DESCRIPTOR for c in typing.get_args(union)] == [
        f.message_type for f in body.fields]


def test_events_are_immutable_and_chunk_data_stays_out_of_repr():
    c = Chunk(offset=1, data=b"\x00" * 1024, epoch=2, epoch_start_offset=0, confirm_offset=0,
              master_max_offset=1025, crc32c=7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.offset = 2  # type: ignore[misc]
    assert "data" not in repr(c) and "crc32c=7" in repr(c)


def test_epoch_entries_checks_each_entry_but_not_their_order():
    assert epoch_entries([(3, 10), (2, 0)], "x") == (EpochEntry(3, 10), EpochEntry(2, 0))
    assert epoch_entries([], "x") == ()
    with pytest.raises(MalformedMessage, match=r"^slave n:1 sent invalid epochs: start_offset -5"):
        epoch_entries([(1, 0), (2, -5)], "slave n:1")


def test_ha_imports_neither_protobuf_nor_grpc():
    for path in pathlib.Path(ha.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("proto", "grpc", "google"), (path.name, name)
