"""The slave side of a replication stream, without I/O.

Feed it the master's messages (`ha.messages` events, decoded from the wire by
slave/slave_wire.py); it answers with actions for the adapter (slave/) to carry out in order. It never touches the
store: the adapter appends, truncates, records epochs and sends what the actions say.

    start()                  -> Hello                  (node id, max offset, epoch entries)
    Welcome                  -> [Truncate], SetConfirm, SendAck      or Disconnect
    Chunk (data)             -> [RecordEpoch], Append, SetConfirm, SendAck
    Chunk (bad CRC)          -> SendNack (re-request from the expected offset)   or Disconnect
    Chunk (empty: heartbeat) -> SetConfirm        (the adapter acks every heartbeat interval)

Rules:
- a chunk must start exactly at the slave's end (`expected_offset`); after a Nack, chunks the
  master had already sent are dropped until the re-sent one arrives;
- its CRC-32C must match; more than `max_crc_failures` in a row ends the session;
- its epoch must be the slave's last epoch (same start) or a later one, which the slave records
  before appending (a chunk never crosses an epoch);
- a master whose epoch is older than the slave's last epoch is stale and refused (fencing);
- the resume point is recomputed from the master's epochs and must equal Welcome.start_offset.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from common.crc import crc32c
from .epoch import EpochCache, EpochError, resume_offset
from .messages import Chunk, Hello, MasterMessage, Welcome


@dataclass(frozen=True)
class Truncate:
    offset: int  # cut the commitlog, queues, index and epoch entries at this record boundary


@dataclass(frozen=True)
class RecordEpoch:
    epoch: int
    start_offset: int


@dataclass(frozen=True)
class Append:
    offset: int
    data: bytes


@dataclass(frozen=True)
class SetConfirm:
    offset: int


@dataclass(frozen=True)
class SendAck:
    offset: int  # everything below is appended


@dataclass(frozen=True)
class SendNack:
    offset: int
    reason: str


@dataclass(frozen=True)
class Disconnect:
    reason: str


SlaveAction = Truncate | RecordEpoch | Append | SetConfirm | SendAck | SendNack | Disconnect


class SlaveState(enum.Enum):
    """A slave session's stage, from before its Hello to closed for good."""

    NEW = "new"
    HELLO_SENT = "hello-sent"
    FOLLOWING = "following"
    RESENDING = "resending"  # a Nack is out; drop chunks until the re-sent one arrives
    CLOSED = "closed"


class SlaveSession:
    """The slave's side of one stream to its master (the transitions and rules of the module
    docstring): owns the stream's state, a copy of the node's epochs (the adapter persists
    what `RecordEpoch` says), the slave's end (`expected_offset`, `max_offset`), the master's
    epoch and max offset as last heard, and the CRC failure count.

    Not thread-safe, and no I/O: its owner (slave/replication_client.py's ReplicationClient)
    uses it from its event loop only and carries out the actions in order."""

    def __init__(self, node_id: str, broker_name: str, *, epochs: EpochCache, min_offset: int,
                 max_offset: int, file_size: int, sync_from_last_file: bool = False,
                 max_crc_failures: int = 3) -> None:
        self.node_id = node_id
        self.broker_name = broker_name
        self.epochs = epochs.copy()  # the session's view; the adapter persists what it records
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.empty = max_offset == 0 and min_offset == 0
        self.file_size = file_size
        self.sync_from_last_file = sync_from_last_file
        self.max_crc_failures = max_crc_failures
        self.state = SlaveState.NEW
        self.expected_offset = max_offset
        self.master_epoch = 0
        self.master_max_offset = 0  # as of the last Welcome or chunk
        self.crc_failures = 0
        self.close_reason = ""

    def start(self) -> Hello:
        self.state = SlaveState.HELLO_SENT
        return Hello(node_id=self.node_id, broker_name=self.broker_name,
                     max_offset=self.max_offset, min_offset=self.min_offset,
                     epochs=self.epochs.entries, sync_from_last_file=self.sync_from_last_file)

    def on_message(self, msg: MasterMessage) -> list[SlaveAction]:
        if self.state is SlaveState.CLOSED:
            return []
        if isinstance(msg, Welcome):
            return self._on_welcome(msg)
        if isinstance(msg, Chunk):
            return self._on_chunk(msg)
        raise TypeError(f"not a master message: {msg!r}")  # the caller's bug, not the master's

    def close(self, reason: str) -> list[SlaveAction]:
        """End the session from outside (the adapter could not decode a message)."""
        return self._close(reason)

    # -- handshake -------------------------------------------------------------------------
    def _on_welcome(self, w: Welcome) -> list[SlaveAction]:
        if self.state is not SlaveState.HELLO_SENT:
            return self._close(f"unexpected Welcome in state {self.state.value}")
        try:
            master = EpochCache(w.epochs)
        except EpochError as e:
            return self._close(f"master sent invalid epochs: {e}")
        if master.last_epoch != w.epoch:
            return self._close(f"master epoch {w.epoch} disagrees with its epoch list "
                               f"(last {master.last_epoch})")
        if w.epoch < self.epochs.last_epoch:
            return self._close(f"stale master: its epoch {w.epoch} is older than this "
                               f"slave's epoch {self.epochs.last_epoch}")
        try:
            point = resume_offset(master, w.master_min_offset, w.master_max_offset, self.epochs,
                                  self.max_offset, slave_empty=self.empty,
                                  sync_from_last_file=self.sync_from_last_file,
                                  file_size=self.file_size)
        except EpochError as e:
            return self._close(str(e))
        if point != w.start_offset:
            return self._close(f"master says resume at {w.start_offset} but the epochs give {point}")
        actions: list[SlaveAction] = []
        # Cut the log beyond the point, and epochs that start at or after it even when no byte
        # is cut (an epoch this node began as master but wrote nothing in): the master's
        # bytes from `point` on belong to the master's epochs.
        if self.epochs.truncate_from(point) or (not self.empty and point < self.max_offset):
            actions.append(Truncate(point))
            self.max_offset = min(self.max_offset, point)
        self.master_epoch = w.epoch
        self.master_max_offset = w.master_max_offset
        self.expected_offset = point
        self.state = SlaveState.FOLLOWING
        actions += [SetConfirm(min(w.confirm_offset, point)), SendAck(point)]
        return actions

    # -- transfer --------------------------------------------------------------------------
    def _on_chunk(self, c: Chunk) -> list[SlaveAction]:
        if self.state not in (SlaveState.FOLLOWING, SlaveState.RESENDING):
            return self._close(f"chunk before the handshake finished (state {self.state.value})")
        self.master_max_offset = max(self.master_max_offset, c.master_max_offset)
        if not c.data:  # heartbeat: the periodic Ack answers it (acking each would double
            return [SetConfirm(min(c.confirm_offset, self.expected_offset))]  # the traffic)
        if c.offset != self.expected_offset:
            if self.state is SlaveState.RESENDING:
                return []  # sent before the master saw our Nack
            return self._close(f"chunk at {c.offset} but this slave ends at {self.expected_offset}")
        actual = crc32c(c.data)
        if actual != c.crc32c:
            self.crc_failures += 1
            if self.crc_failures > self.max_crc_failures:
                return self._close(f"{self.crc_failures} chunks in a row failed their CRC check")
            self.state = SlaveState.RESENDING
            return [SendNack(c.offset, f"CRC-32C mismatch at {c.offset}: chunk says "
                                       f"{c.crc32c:#010x}, data has {actual:#010x}")]
        actions: list[SlaveAction] = []
        last = self.epochs.last
        if c.epoch_start_offset > c.offset:
            return self._close(f"chunk at {c.offset} claims epoch {c.epoch} starting later, "
                               f"at {c.epoch_start_offset}")
        if last is None or c.epoch > last.epoch:
            if c.epoch > self.master_epoch:
                return self._close(f"chunk of epoch {c.epoch} from a master in epoch {self.master_epoch}")
            try:
                self.epochs.append(c.epoch, c.epoch_start_offset)
            except EpochError as e:
                return self._close(f"cannot record epoch {c.epoch}: {e}")
            actions.append(RecordEpoch(c.epoch, c.epoch_start_offset))
        elif c.epoch < last.epoch or c.epoch_start_offset != last.start_offset:
            return self._close(f"chunk of epoch {c.epoch} starting at {c.epoch_start_offset} "
                               f"does not match this slave's last epoch {last.epoch} starting at "
                               f"{last.start_offset}")
        self.crc_failures = 0
        self.state = SlaveState.FOLLOWING
        self.expected_offset = c.offset + len(c.data)
        self.max_offset = self.expected_offset
        self.empty = False
        actions += [Append(c.offset, c.data), SetConfirm(min(c.confirm_offset, self.expected_offset)),
                    SendAck(self.expected_offset)]
        return actions

    def _close(self, reason: str) -> list[SlaveAction]:
        self.state = SlaveState.CLOSED
        self.close_reason = reason
        return [Disconnect(reason)]
