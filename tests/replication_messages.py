"""Replication messages for wire tests: hypothesis strategies of every `ha.messages` event
(values across the whole range of each proto field's type) and a reference encoder that
builds the protobuf message from an event's fields by name, independently of the adapters'
hand-written mappings."""
from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from ha.epoch import EpochEntry
from ha.messages import Ack, Chunk, Hello, MasterMessage, Nack, SlaveMessage, Welcome
from proto import replication_pb2 as pb

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UINT32 = st.integers(0, (1 << 32) - 1)
EPOCHS = st.lists(st.builds(EpochEntry, st.integers(1, (1 << 31) - 1),
                            st.integers(0, (1 << 63) - 1)), max_size=4).map(tuple)

HELLOS = st.builds(Hello, node_id=st.text(), broker_name=st.text(), max_offset=INT64,
                   min_offset=INT64, epochs=EPOCHS, sync_from_last_file=st.booleans())
ACKS = st.builds(Ack, max_offset=INT64, flushed_offset=INT64)
NACKS = st.builds(Nack, offset=INT64, reason=st.text())
WELCOMES = st.builds(Welcome, epoch=INT32, epochs=EPOCHS, start_offset=INT64,
                     master_min_offset=INT64, master_max_offset=INT64, confirm_offset=INT64)
CHUNKS = st.builds(Chunk, offset=INT64, data=st.binary(max_size=256), epoch=INT32,
                   epoch_start_offset=INT64, confirm_offset=INT64, master_max_offset=INT64,
                   crc32c=UINT32)
SLAVE_MESSAGES = st.one_of(HELLOS, ACKS, NACKS)
MASTER_MESSAGES = st.one_of(WELCOMES, CHUNKS)

# event class -> (protobuf class, the envelope's oneof field)
PROTO = {Hello: (pb.Hello, "hello"), Ack: (pb.Ack, "ack"), Nack: (pb.Nack, "nack"),
         Welcome: (pb.Welcome, "welcome"), Chunk: (pb.Chunk, "chunk"),
         EpochEntry: (pb.EpochEntry, None)}


def reference_pb(event: SlaveMessage | MasterMessage) -> pb.SlaveMessage | pb.MasterMessage:
    """The envelope holding `event`, every field copied by name (epoch entries as dicts)."""
    envelope = pb.SlaveMessage if isinstance(event, (Hello, Ack, Nack)) else pb.MasterMessage
    return envelope(**{PROTO[type(event)][1]: dataclasses.asdict(event)})


def through_bytes(msg):
    """`msg` as the peer parses it."""
    return type(msg).FromString(msg.SerializeToString())
