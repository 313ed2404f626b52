"""The replication protocol's messages as typed values: what the sessions take and return.

One frozen dataclass per message of `proto/replication.proto`, with the same field names, so
`ha/` never sees generated protobuf classes. The gRPC adapters translate, each direction in
one place: `master/master_wire.py` (SlaveMessage -> events, events -> MasterMessage) and
`slave/slave_wire.py` (events -> SlaveMessage, MasterMessage -> events).

    sent by  event                proto message (package rmqstore.replication.v1)
    -------  -------------------  -----------------------------------------------
    slave    Hello                Hello       in SlaveMessage.hello
    slave    Ack                  Ack         in SlaveMessage.ack
    slave    Nack                 Nack        in SlaveMessage.nack
    master   Welcome              Welcome     in MasterMessage.welcome
    master   Chunk                Chunk       in MasterMessage.chunk
    both     ha.epoch.EpochEntry  EpochEntry  in Hello.epochs and Welcome.epochs

The envelopes (SlaveMessage, MasterMessage: a oneof) become the unions `SlaveMessage` and
`MasterMessage` below. Proto3 fields are never absent, so neither are these: a zero on the
wire is a zero here. An envelope without a body, or an epoch entry out of range (EpochEntry
validates itself), cannot become an event: the adapter's decoder raises `MalformedMessage`
and the stream ends with its text as the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .epoch import EpochEntry, EpochError


class MalformedMessage(Exception):
    """A peer's message cannot be represented as an event: the peer is at fault (h11's
    RemoteProtocolError), and the message says how, worded as a reason to end the stream."""


def epoch_entries(pairs: Iterable[tuple[int, int]], sender: str) -> tuple[EpochEntry, ...]:
    """The (epoch, start_offset) pairs `sender` put on the wire, as entries; MalformedMessage
    when one is out of range. Their order is the sessions' to check: a list out of order is a
    refusal of the handshake, not an undecodable message."""
    try:
        return tuple(EpochEntry(epoch, start) for epoch, start in pairs)
    except EpochError as e:
        raise MalformedMessage(f"{sender} sent invalid epochs: {e}") from e


# -- slave -> master ------------------------------------------------------------------------
@dataclass(frozen=True)
class Hello:
    node_id: str  # "<brokerName>:<brokerId>"
    broker_name: str  # must match the master's
    max_offset: int  # end of the slave's commitlog (0 when empty)
    min_offset: int
    epochs: tuple[EpochEntry, ...]  # the slave's epoch file, oldest first
    sync_from_last_file: bool  # an empty slave starts at the master's last file


@dataclass(frozen=True)
class Ack:
    max_offset: int  # everything below is appended on the slave
    flushed_offset: int  # everything below is on the slave's disk


@dataclass(frozen=True)
class Nack:
    offset: int  # resend from here
    reason: str


# -- master -> slave ------------------------------------------------------------------------
@dataclass(frozen=True)
class Welcome:
    epoch: int  # the master's current epoch
    epochs: tuple[EpochEntry, ...]  # the master's epoch file, oldest first
    start_offset: int  # the slave continues here; it truncates anything beyond
    master_min_offset: int
    master_max_offset: int
    confirm_offset: int


@dataclass(frozen=True)
class Chunk:
    """Raw commitlog bytes, never crossing a commitlog file or an epoch; empty: a heartbeat.

    `data` (up to ~1 MiB) is passed through by reference from the commitlog read to the
    protobuf message and back out of it: bytes are immutable, so nothing here copies them."""
    offset: int  # physical offset of data[0]
    data: bytes = field(repr=False)  # kept out of repr: a MiB in a log line or a test diff
    epoch: int  # epoch the bytes were written in (0: a heartbeat of a master without epochs)
    epoch_start_offset: int  # where that epoch began
    confirm_offset: int  # min of the in-sync acks and the master's max
    master_max_offset: int
    crc32c: int  # CRC-32C (Castagnoli) of data, see common/crc.py


SlaveMessage = Hello | Ack | Nack
MasterMessage = Welcome | Chunk
